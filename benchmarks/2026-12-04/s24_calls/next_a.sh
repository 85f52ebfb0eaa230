#!/usr/bin/env bash
# Prepared in the twenty-fourth session (no device was lent), for the next one. First, on the CPU, in order:
#   git apply benchmarks/2026-12-04/s23_calls/{gluon_reciprocal,gluon_requant}.patch \
#             benchmarks/2026-12-04/s24_calls/{pieces,fused_quant_decode}.patch
# (test_gluon_compile.py then passes 22 on Triton 3.6). Then run this as a device call (carry .whl): the chain
# decode's bits with the pieces (every launch choice, M = 1 .. 64, 48- and 8-row weight tiles), the ptxas checks
# on the device's Triton, then pieces_probe.py's two rounds (GEMM alone: whole boxes against pieces; the weight on
# wgmma's narrow side, tiles fitted to one wave). About 5-7 minutes.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -p no:cacheprovider"
timeout 240 $T -m gpu tests/numerics/gpu/test_gemm_gpu.py -k "chain_decode or chain_quantize" > "$OUT/tests_chain.log" 2>&1
rc=$?; echo "chain tests rc=$rc"; grep -E "passed|failed|FAILED|Error|assert" "$OUT/tests_chain.log" | tail -n 8 | cut -c1-300
# A timeout here is most likely a launch waiting forever on its ring (the boxes' bytes against the barrier's
# expected count): the probes would wait too, so stop.
[ $rc -eq 124 ] && { echo "chain tests timed out: probes skipped"; exit 124; }
timeout 90 $T tests/numerics/test_gluon_compile.py > "$OUT/tests_compile.log" 2>&1
echo "compile tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_compile.log" | tail -n 4 | cut -c1-300
for round in tokens narrow; do
  timeout 150 python3 benchmarks/2026-12-04/s24_calls/pieces_probe.py "$OUT/$round.json" $round > "$OUT/$round.log" 2>&1
  echo "probe $round rc=$?"; grep -E "M=|done|Error" "$OUT/$round.log" | cut -c1-300
done
