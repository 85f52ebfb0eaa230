#!/usr/bin/env bash
# Call 4 (twelfth session): the weight quantizer writing Q(W)^T as words of four rows (no byte transpose): its GPU
# tests and the ones around it, its bandwidth, and the linear bench --quick with torchao beside ours again.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
CLI="from precision_engine.cli.app import main; main()"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_quant_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/test_fused_linear.py tests/numerics/gpu/test_graph_capture_gpu.py \
  2>&1 | grep -E "passed|failed|FAILED|Error" | tail -n 12
timeout 40 python3 -m precision_engine.bench.quant --only "128x128" --reps 30 --json "$OUT/bench_quant_weight.json" \
  2>&1 | grep -v "^\[W\|Warn" | tee "$OUT/bench_quant_weight.txt"
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 300 python3 -c "$CLI" bench linear --quick \
  --variants bf16,fp8_cublas,fp8_bi,torchao --out "$OUT/bench_linear_torchao.json" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/linear_torchao.txt" | tail -n 12
