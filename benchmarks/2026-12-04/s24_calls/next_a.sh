#!/usr/bin/env bash
# Prepared in the twenty-fourth session (no device was lent), for the next one. First, on the CPU, in order:
#   git apply benchmarks/2026-12-04/s23_calls/{gluon_reciprocal,gluon_requant}.patch \
#             benchmarks/2026-12-04/s24_calls/{pieces,fused_quant_decode}.patch
# (test_gluon_compile.py then passes 22 on Triton 3.6 with ptxas, on the CPU). Then run this as a device call
# (carry .whl): the chain decode's bits with the pieces (every launch choice, M = 1 .. 64, 48- and 8-row weight
# tiles; ~3 minutes with a cold Triton cache), the one-launch decode's bits, then pieces_probe.py's two rounds
# (GEMM alone: whole boxes against pieces; the weight on wgmma's narrow side, tiles fitted to one wave). The
# timeouts add up to 570 s; about 6 minutes as expected. A timeout in a test step prints no summary line: its
# log's last PASSED lines say how far it got.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -p no:cacheprovider"
timeout 240 $T -m gpu tests/numerics/gpu/test_gemm_gpu.py -k chain_decode -v > "$OUT/tests_chain.log" 2>&1
echo "chain decode tests rc=$?"; grep -E "PASSED|FAILED|passed|failed|Error|assert" "$OUT/tests_chain.log" | tail -n 10 | cut -c1-300
timeout 80 $T -m gpu tests/numerics/gpu/test_gemm_gpu.py -k chain_quantize -v > "$OUT/tests_quantize.log" 2>&1
echo "one-launch tests rc=$?"; grep -E "PASSED|FAILED|passed|failed|Error|assert" "$OUT/tests_quantize.log" | tail -n 8 | cut -c1-300
timeout 120 python3 benchmarks/2026-12-04/s24_calls/pieces_probe.py "$OUT/tokens.json" tokens > "$OUT/tokens.log" 2>&1
echo "probe tokens rc=$?"; grep -E "M=|done|Error" "$OUT/tokens.log" | cut -c1-300
timeout 130 python3 benchmarks/2026-12-04/s24_calls/pieces_probe.py "$OUT/narrow.json" narrow > "$OUT/narrow.log" 2>&1
echo "probe narrow rc=$?"; grep -E "M=|done|Error" "$OUT/narrow.log" | cut -c1-300
