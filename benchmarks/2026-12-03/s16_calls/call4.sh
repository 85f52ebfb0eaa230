#!/usr/bin/env bash
# Call 4 (sixteenth session), on 3f91ab5 as call 3: one GRPO step of the whole 8B (rollout and trainer logprobs
# bitwise), the 8B block fwd+bwd, and torchao's Float8BlockwiseLinear beside ours at 8192 tokens.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
CLI="from precision_engine.cli.app import main; main()"
timeout 200 python3 -m precision_engine.bench.rl_step --layers 0 --master-weights bf16 --micro-batch 32 \
  --out "$OUT/rl_step.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tail -n 4 | tee "$OUT/rl_step.txt"
timeout 120 python3 -c "$CLI" bench block --reps 10 --policy bf16_baseline --policy jetrl_unified \
  --out "$OUT/bench_block.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tail -n 12 | tee "$OUT/block.txt"
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 200 python3 -c "$CLI" bench linear --quick --tokens 8192 \
  --variants bf16,fp8_bi,torchao --out "$OUT/bench_torchao.json" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(\|return Variable" > "$OUT/torchao.txt"
echo "torchao rc=$?"; cut -c1-150 "$OUT/torchao.txt" | grep -v "^ *$" | tail -n 12
