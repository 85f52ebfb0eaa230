#!/usr/bin/env bash
# Thirtieth session, call B (carry .whl; about 4 minutes; after call A's bits pass): what the Gluon re-quantizer
# is worth to a training step. step_ab.py times the batch-invariant linear's graphed fwd+bwd on the 8B shapes at
# 8192 tokens with the Triton and the Gluon re-quantizer alternating in one process, BF16 in each round, and
# checks dW's bytes equal under both.
set -u
cd "$(dirname "$0")/../../.."
git apply benchmarks/2026-12-05/s30_calls/gluon_requant.patch || { echo "the patch does not apply"; exit 4; }
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 480 python3 benchmarks/2026-12-05/s30_calls/step_ab.py "$OUT/step_ab.json" 2>&1 \
  | grep -v "Warning\|warn(" | tee "$OUT/step_ab.txt" | tail -n 12 | cut -c1-300
