#!/usr/bin/env bash
# Prepared in the thirty-fourth session for the first H200 that comes (carry .whl and .dg; timeouts add up to
# 570 s, about 7 minutes expected): issue 12's targets re-measured on its own card, which has not run since the
# twenty-ninth session (the Gluon re-quantizer, the one-correction quotient and BF16-beside-torchao landed since):
#   1. the re-quantizer's target rows against a copy of the same bytes (never run on an H200 with the Gluon kernel);
#   2. the 8B block in both modes (the target line now also gives the fast BF16 block's ratio);
#   3. the whole linear's decode at M = 1..64 (49 of 72 rows at 1.5x in the twenty-ninth session);
#   4. `bench linear` at 8192 and 16384 tokens, ours against BF16 (no torchao: its autotuning alone takes minutes).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
precision=(python3 -c "from precision_engine.cli.app import main; main()")
timeout 70 "${precision[@]}" bench quant --reps 30 --only "requant fp8 -,requant fp8 triton kernel" \
  --out "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "quant rc=$?"; grep -E ">= 80%" "$OUT/quant.txt" | cut -c1-200
source scripts/device_deep_gemm.sh
timeout 150 "${precision[@]}" bench block --reps 10 --policy bf16_baseline --policy jetrl_unified \
  --out "$OUT/bench_block.json" > "$OUT/bench_block.txt" 2>&1
echo "bench block rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/bench_block.txt" | tail -n 12 | cut -c1-200
timeout 110 "${precision[@]}" bench ceiling --decode --tokens 1,8,16,24,32,40,48,56,64 \
  --out "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
echo "decode rc=$?"; grep "^target" "$OUT/decode.txt" | cut -c1-600
timeout 240 "${precision[@]}" bench linear --tokens 8192,16384 --variants bf16,fp8_bi \
  --out "$OUT/bench_linear.json" > "$OUT/bench_linear.txt" 2>&1
echo "bench linear rc=$?"; grep -E "target met|DeepGEMM" "$OUT/bench_linear.txt" | cut -c1-400
