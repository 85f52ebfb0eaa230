#!/usr/bin/env bash
# Prepared in the twenty-seventh session, for the next one. First, on the CPU:
#   git apply benchmarks/2026-12-05/s27_calls/grouped_quant_decode.patch
# (the one-launch decode of s24's fused_quant_decode.patch, rebased on main, its quantizer warps taking 4, 2 or 1
# K blocks at a time; test_gluon_compile.py then passes 24 on Triton 3.6). Then this call (carry .whl): the one
# launch's bits against the two launches (every M it takes, groups with and without a tail), then
# s23_calls/fused_probe.py: one launch against the two launches and against the GEMM given Q(x), per shape and M.
# About 4 minutes. If the one launch wins where it runs: `git apply benchmarks/2026-12-04/s24_calls/
# one_launch_linear.patch` (the linear takes it), `pytest -m gpu tests/numerics/gpu/test_linear_gpu.py -k
# one_launch`, and `bench ceiling --decode --tokens 1,8,16,24,32`.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
gpu_tests tests_one_launch 200 tests/numerics/gpu/test_gemm_gpu.py -k chain_quantize
timeout 150 python3 benchmarks/2026-12-04/s23_calls/fused_probe.py "$OUT/fused.json" > "$OUT/fused.log" 2>&1
echo "probe rc=$?"; grep -E "M=|Error" "$OUT/fused.log" | cut -c1-250
