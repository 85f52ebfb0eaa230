#!/usr/bin/env bash
# Call 2 (fourteenth session): the pinned cuBLAS kernel wired in as AUTO's batch-invariant forward: its GPU tests,
# the on-policy engine's bitwise tests on it, then `bench linear` (every 8B shape, training and decode rows).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
CLI="from precision_engine.cli.app import main; main()"
python3 -c "import time; t=time.time(); from precision_engine.numerics import cublas_pinned as c; c.extension(); print(f'extension {time.time()-t:.1f} s')"
timeout 260 python3 -m pytest -q -rf -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py tests/numerics/test_fused_linear.py \
  > "$OUT/test_numerics.log" 2>&1 &
timeout 260 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
grep -E "passed|failed|FAILED|Error" "$OUT/test_numerics.log" | tail -n 14 | cut -c1-300
grep -E "passed|failed|FAILED|Error" "$OUT/test_engine.log" | tail -n 8 | cut -c1-300
timeout 330 python3 -c "$CLI" bench linear --variants bf16,fp8_cublas,fp8_bi --out "$OUT/bench_linear.json" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" > "$OUT/linear.txt"
echo "linear rc=$?"; tail -n 75 "$OUT/linear.txt" | cut -c1-160
