#!/usr/bin/env bash
# Thirty-fourth session (carry .whl and .dg, about 5 minutes): the 8B decoder block fwd+bwd, BF16 against
# jetrl_unified (last timed on the H200 before the Gluon re-quantizer and the one-correction quotient: 1.48 / 1.49x),
# then the one-launch bits of the batch-invariant linear across M on the 8B shapes.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
timeout 240 python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
  --policy bf16_baseline --policy jetrl_unified --mode batch-invariant --out "$OUT/bench_block.json" \
  > "$OUT/bench_block.txt" 2>&1
echo "bench block rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/bench_block.txt" | tail -n 16 | cut -c1-200
