#!/usr/bin/env bash
# Twenty-ninth session, call D (carry .whl): the engine's on-policy rollout (random 8B, jetrl_unified_kv,
# batch-invariant) under the wide weights' decode rule before and as shipped (rollout_ab.py).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 420 python3 benchmarks/2026-12-05/s29_calls/rollout_ab.py "$OUT/rollout_ab.json" 2>&1 \
  | grep -v "Warning\|warn(" | tee "$OUT/rollout_ab.txt" | tail -n 20 | cut -c1-300
