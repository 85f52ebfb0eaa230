#!/usr/bin/env bash
# Call 7 (sixteenth session), on acc8ca9 (chain_config retuned): one GRPO step of the whole 8B.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
timeout 220 python3 -m precision_engine.bench.rl_step --layers 0 --master-weights bf16 --micro-batch 32 \
  --out "$OUT/rl_step.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tail -n 4 | tee "$OUT/rl_step.txt"
