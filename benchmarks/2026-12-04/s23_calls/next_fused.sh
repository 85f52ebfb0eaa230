#!/usr/bin/env bash
# Prepared for the next session (not run: the twenty-third ended with no device time left). First, on the CPU, in
# order: git apply benchmarks/2026-12-04/s23_calls/{gluon_reciprocal,gluon_requant,fused_quant_decode}.patch
# (test_gluon_compile.py passes 17 on Triton 3.6 with all three). Then run this as a device call: the chain decode's
# bits (its MMA partition changed: token scales may come from the quantizer warps), the one-launch decode's bits
# against Q(x) then the chain GEMM, the ptxas checks, then fused_probe.py (whole linear: today's two launches,
# Q(x) given, one launch).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -p no:cacheprovider"
timeout 200 $T -m gpu tests/numerics/gpu/test_gemm_gpu.py -k "chain_decode or chain_quantize" > "$OUT/tests_chain.log" 2>&1
echo "chain tests rc=$?"; grep -E "passed|failed|FAILED|Error|assert" "$OUT/tests_chain.log" | tail -n 8 | cut -c1-300
timeout 60 $T tests/numerics/test_gluon_compile.py > "$OUT/tests_compile.log" 2>&1
echo "compile tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_compile.log" | tail -n 4 | cut -c1-300
timeout 150 python3 benchmarks/2026-12-04/s23_calls/fused_probe.py "$OUT/fused.json" > "$OUT/fused.log" 2>&1
echo "probe rc=$?"; grep -E "M=|Error" "$OUT/fused.log" | cut -c1-250
