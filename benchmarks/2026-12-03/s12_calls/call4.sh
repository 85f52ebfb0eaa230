#!/usr/bin/env bash
# Call 4 (twelfth session, about 290 s of device budget left): the weight quantizer writing Q(W)^T as words of
# four rows (no byte transpose): its GPU tests and the ones around it, its bandwidth, then one 14336x4096 training
# step's GPU time per kernel beside torchao's.
set -u
cd "$(dirname "$0")/../../.."
HERE=benchmarks/2026-12-03/s12_calls
source scripts/device_env.sh
timeout 140 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_quant_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py \
  2>&1 | grep -E "passed|failed|FAILED|Error" | tail -n 12
timeout 30 python3 -m precision_engine.bench.quant --only "128x128" --reps 30 --json "$OUT/bench_quant_weight.json" \
  2>&1 | grep -v "^\[W\|Warn" | tee "$OUT/bench_quant_weight.txt"
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 100 python3 $HERE/profile_step.py 14336 4096 8192 fp8_cublas,torchao 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/profile_14336.txt"
