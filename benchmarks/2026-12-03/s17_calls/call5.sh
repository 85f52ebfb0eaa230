#!/usr/bin/env bash
# Call 5 (seventeenth session): GPU tests after `gemm._cublas_operands` was split out (GEMM, linear, graph capture;
# the engine's on-policy tests), and what a Triton launch costs the host (launch_probe.py).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
D=benchmarks/2026-12-03/s17_calls
timeout 270 python3 -m pytest -q -rf -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py \
  tests/bench/test_bench_ceiling.py > "$OUT/test_numerics.log" 2>&1 &
timeout 270 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
timeout 60 python3 $D/launch_probe.py 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/launch_probe.txt"
grep -E "passed|failed|FAILED|Error" "$OUT/test_numerics.log" | tail -n 12 | cut -c1-400
grep -E "passed|failed|FAILED|Error" "$OUT/test_engine.log" | tail -n 6 | cut -c1-300
