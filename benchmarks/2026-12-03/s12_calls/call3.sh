#!/usr/bin/env bash
# Call 3 (twelfth session): call 2's numerics test log did not come back (too many files): the same GPU tests
# again, summarised; then the linear bench --quick with torchao beside ours, eager and graphed.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
CLI="from precision_engine.cli.app import main; main()"
timeout 220 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_quant_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_gemm_gpu.py tests/numerics/test_fused_linear.py \
  tests/numerics/gpu/test_graph_capture_gpu.py 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -n 15
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 330 python3 -c "$CLI" bench linear --quick \
  --variants bf16,fp8_cublas,fp8_bi,torchao --out "$OUT/bench_linear_torchao.json" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/linear_torchao.txt" | tail -n 16
