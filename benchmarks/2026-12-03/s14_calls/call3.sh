#!/usr/bin/env bash
# Call 3 (fourteenth session): which batch-invariant kernel should AUTO pick? One GRPO step of the whole 8B
# (rollout + training, bench.rl_step at 32 sequences per micro-batch) with the pinned cuBLAS kernel, then with
# the Triton kernel (the extension reported unavailable, as where it does not build); the 8B block on the first.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
CLI="from precision_engine.cli.app import main; main()"
STEP="--layers 0 --master-weights bf16 --micro-batch 32"
timeout 200 python3 -m precision_engine.bench.rl_step $STEP --out "$OUT/rl_step_pinned.json" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tail -n 4 | tee "$OUT/rl_step_pinned.txt"
timeout 200 python3 -c "
import precision_engine.numerics.cublas_pinned as c
c.available = lambda: False
from precision_engine.bench.rl_step import main
main('$STEP --out $OUT/rl_step_triton.json'.split())" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tail -n 4 | tee "$OUT/rl_step_triton.txt"
timeout 150 python3 -c "$CLI" bench block --reps 10 --policy bf16_baseline --policy jetrl_unified \
  --out "$OUT/bench_block.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/block.txt" | tail -n 8
