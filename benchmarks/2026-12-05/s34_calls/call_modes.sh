#!/usr/bin/env bash
# Thirty-fourth session (carry .whl and .dg, about 4 minutes): the 8B decoder block fwd+bwd in both modes,
# bf16_baseline and jetrl_unified (the target judges the batch-invariant step against the batch-invariant BF16
# block; the fast-mode BF16 block, cuBLAS and SDPA, is what a run that gives up invariance would pay), then the
# re-quantizer's rows against a copy of the same bytes (the card's target line).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
timeout 300 python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
  --policy bf16_baseline --policy jetrl_unified --out "$OUT/bench_block_modes.json" > "$OUT/bench_block_modes.txt" 2>&1
echo "bench block rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/bench_block_modes.txt" | tail -n 16 | cut -c1-200
timeout 100 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep --reps 30 \
  --only "requant fp8 -,requant fp8 triton kernel,requant gluon w8 t8" --out "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "quant rc=$?"; grep -E "^(requant|copy)|>= 80%" "$OUT/quant.txt" | cut -c1-160
