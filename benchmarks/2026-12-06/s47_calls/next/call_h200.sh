#!/usr/bin/env bash
# Prepared in the forty-seventh session for the next H200 (carry .whl and .dg; about 7 minutes with the start; an
# H100 exits at once): (1) `s42_calls/swap_probe.py` on the two 4096-wide weights short of 1.5x in decode on the
# H200 (4096x4096 at M = 8-48, the fused qkv 6144x4096 at every M): weight tiles on wgmma's narrow side fitted to
# one wave at M <= 32, never timed on an H200; (2) the 8B block (bf16_baseline, jetrl_unified,
# jetrl_unified_wgrad_blocks; DeepGEMM), last timed on an H200 in the thirty-ninth session; (3) the re-quantizers
# against copy (`bench quant --only requant`).
set -u
cd "$(dirname "$0")/../../../.."
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
case "$card" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
source scripts/device_env.sh
timeout ${SWAP_S:-200} python3 benchmarks/2026-12-06/s42_calls/swap_probe.py --shapes 4096x4096,6144x4096 \
  --tokens 1,8,16,24,32 --rounds 3 2>&1 | grep -v Warning | tee "$OUT/swap.txt"
echo "swap rc=${PIPESTATUS[0]}"
source scripts/device_deep_gemm.sh
precision=(python3 -c "from precision_engine.cli.app import main; main()")
timeout ${BLOCK_S:-150} "${precision[@]}" bench block --reps 10 --policy bf16_baseline --policy jetrl_unified \
  --policy jetrl_unified_wgrad_blocks --out "$OUT/block.json" > "$OUT/block.txt" 2>&1
echo "block rc=$?"; grep -E "^(bf16_baseline|jetrl_unified[a-z_]*) +(fast|batch)|target" "$OUT/block.txt" | cut -c1-160
timeout ${QUANT_S:-90} "${precision[@]}" bench quant --reps 30 --only requant --out "$OUT/quant.json" \
  > "$OUT/quant.txt" 2>&1
echo "quant rc=$?"; grep -E "requant|copy" "$OUT/quant.txt" | cut -c1-120
