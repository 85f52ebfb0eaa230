#!/usr/bin/env bash
# Call 4 (fourteenth session): the final state, where AUTO's batch-invariant forward is Triton again and the
# pinned cuBLAS kernel runs by name: GPU tests (gemm, linear, graph capture, compile, on-policy engine), then
# `bench kernels --quick` (its cublas_pinned column). Trimmed to fit the device time left after refused starts.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
CLI="from precision_engine.cli.app import main; main()"
python3 -c "import time; t=time.time(); from precision_engine.numerics import cublas_pinned as c; c.extension(); print(f'extension {time.time()-t:.1f} s')"
timeout 200 python3 -m pytest -q -rf -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py \
  tests/numerics/test_fused_linear.py tests/numerics/test_linear.py > "$OUT/test_numerics.log" 2>&1 &
timeout 200 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
grep -E "passed|failed|FAILED|Error" "$OUT/test_numerics.log" | tail -n 12 | cut -c1-300
grep -E "passed|failed|FAILED|Error" "$OUT/test_engine.log" | tail -n 6 | cut -c1-300
timeout 120 python3 -c "$CLI" bench kernels --quick --out "$OUT/bench_kernels.json" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/kernels.txt" | tail -n 8 | cut -c1-220
