#!/usr/bin/env bash
# Call 2 (twentieth session): the GPU tests call 1's 170 s cut short (its numerics group stopped at 110 passed,
# none failed, inside test_deep_gemm_gpu.py: linear 5, quantizers 93, graph capture 8, DeepGEMM 4 of 7): the GEMM
# tests without DeepGEMM while it builds, then the DeepGEMM tests, in the ~4 min of device time left.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -m gpu -p no:cacheprovider"
timeout 150 $T tests/numerics/gpu/test_gemm_gpu.py > "$OUT/test_gemm.log" 2>&1 &
source benchmarks/2026-12-04/s20_calls/dg_setup.sh
wait
echo "== test_gemm"; grep -E "passed|failed|FAILED|Error" "$OUT/test_gemm.log" | tail -n 6 | cut -c1-300
timeout 120 $T tests/numerics/gpu/test_deep_gemm_gpu.py > "$OUT/test_deep_gemm.log" 2>&1
echo "== test_deep_gemm"; grep -E "passed|failed|FAILED|Error" "$OUT/test_deep_gemm.log" | tail -n 6 | cut -c1-300
