#!/usr/bin/env bash
# Call 1 (thirteenth session): the word-packed Q(W)^T weight quantizer's GPU tests and bench row; the Gluon
# training GEMM with its warpgroups staggered once per tile, A/B against the shipped schedules, twice.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_quant_gpu.py 2>&1 \
  | grep -E "passed|failed|FAILED|Error" | tail -n 12
timeout 90 python3 -m precision_engine.bench.quant --only "128x128 weight" --json "$OUT/bench_quant.json" 2>&1 \
  | tail -n 12
for run in 1 2; do
  timeout 150 python3 scripts/gluon_sweep.py "$OUT/gluon_sweep_$run.json" > "$OUT/gluon_sweep_$run.txt" 2>&1
  echo "sweep $run rc=$?"; tail -n 16 "$OUT/gluon_sweep_$run.txt"
done
