#!/usr/bin/env bash
# Call 2 (twelfth session): one GRPO step of the whole 8B at 32 sequences per micro-batch (out of memory before the
# chunked logprob), the block's kernel profile, and one 14336x4096 training step's kernels beside torchao's.
set -u
cd "$(dirname "$0")/../../.."
HERE=benchmarks/2026-12-03/s12_calls
source scripts/device_env.sh
timeout 170 python3 -m precision_engine.bench.rl_step --layers 0 --master-weights bf16 --micro-batch 32 \
  --out "$OUT/rl_step_mb32.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tail -n 6 | tee "$OUT/rl_step.txt"
timeout 90 python3 benchmarks/2026-12-01/s8_sweeps/profile_step.py block 2>&1 | grep -v "^\[W\|Warning\|warn(" \
  | tee "$OUT/profile_block.txt"
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 200 python3 $HERE/profile_step.py 14336 4096 8192 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/profile_14336.txt"
