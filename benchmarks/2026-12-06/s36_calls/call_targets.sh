#!/usr/bin/env bash
# s34_calls/call_h200.sh without its block step (call_lse.sh times the block); carry .whl and .dg, about 6 minutes:
#   1. the re-quantizer's target rows against a copy of the same bytes;
#   2. the whole linear's decode at M = 1..64 (49 of 72 rows at 1.5x on the H200 in the twenty-ninth session);
#   3. `bench linear` at 8192 and 16384 tokens, ours against BF16 (no torchao: its autotuning alone takes minutes).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
precision=(python3 -c "from precision_engine.cli.app import main; main()")
timeout 70 "${precision[@]}" bench quant --reps 30 --only "requant fp8 -,requant fp8 triton kernel" \
  --out "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "quant rc=$?"; grep -E ">= 80%" "$OUT/quant.txt" | cut -c1-200
source scripts/device_deep_gemm.sh
timeout 110 "${precision[@]}" bench ceiling --decode --tokens 1,8,16,24,32,40,48,56,64 \
  --out "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
echo "decode rc=$?"; grep "^target" "$OUT/decode.txt" | cut -c1-600
timeout 240 "${precision[@]}" bench linear --tokens 8192,16384 --variants bf16,fp8_bi \
  --out "$OUT/bench_linear.json" > "$OUT/bench_linear.txt" 2>&1
echo "bench linear rc=$?"; grep -E "target met|DeepGEMM" "$OUT/bench_linear.txt" | cut -c1-400
