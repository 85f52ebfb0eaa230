#!/usr/bin/env bash
# Call 1 (eleventh session): the GPU tests (the tenth session's decode GEMM that quantizes its own tokens,
# 387ecc9, its review mends, and the graphed FP8 training step), every 8B decode row (M = 1, 16, 64; graph
# replays), the linear bench --quick with its graphed passes (no torchao), the block with its graphed pass.
set -u
cd "$(dirname "$0")/../../.."
SKIP="bench_linear bench_quant bench_ceiling bench_rollout profile_decode bench_invariant bench_block" bash scripts/gpu_final.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import precision_engine.policy, precision_engine.cli.app" || exit 3
CLI="from precision_engine.cli.app import main; main()"
grep -h "passed\|failed\|error" /tmp/gpu_final/test_*.log | tail -n 12
timeout 120 python3 - <<'PY' 2>&1 | tee "$OUT/decode.txt" | tail -n 30
import json, os
from precision_engine.bench.linear import bench_linear, format_table
rows = bench_linear(ms=(1, 16, 64), variants=("bf16", "fp8_bi"), reps=50)
json.dump(rows, open(os.environ["OUT"] + "/decode.json", "w"), indent=1)
print(format_table(rows))
PY
timeout 150 python3 -c "$CLI" bench linear --quick --variants bf16,fp8_cublas,fp8_bi --out "$OUT/bench_linear.json" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/linear.txt" | tail -n 16
timeout 150 python3 -c "$CLI" bench block --reps 10 --policy bf16_baseline --policy jetrl_unified \
  --out "$OUT/bench_block.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/block.txt" | tail -n 14
