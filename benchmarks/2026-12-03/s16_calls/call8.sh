#!/usr/bin/env bash
# Call 8 (sixteenth session), on db0a906 (one ring-fill helper for the three Gluon TMA warps): the Gluon compile
# tests, the GPU tests (GEMM, split sums, linear, graph capture, fused linear; the engine's on-policy tests).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
python3 -m pytest -q -p no:cacheprovider tests/numerics/test_gluon_compile.py 2>&1 | tail -n 2
timeout 280 python3 -m pytest -q -rf -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py \
  tests/numerics/gpu/test_split_sums_gpu.py tests/numerics/gpu/test_linear_gpu.py \
  tests/numerics/gpu/test_graph_capture_gpu.py tests/numerics/test_fused_linear.py > "$OUT/test_numerics.log" 2>&1 &
timeout 280 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
grep -E "passed|failed|FAILED|Error" "$OUT/test_numerics.log" | tail -n 12 | cut -c1-400
grep -E "passed|failed|FAILED|Error" "$OUT/test_engine.log" | tail -n 6 | cut -c1-300
