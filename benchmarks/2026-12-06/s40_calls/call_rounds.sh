#!/usr/bin/env bash
# Fortieth session (carry .whl and .dg; about 5 minutes a token count): `bench linear --rounds 3` on the 8B
# projections at TOKENS (first argument), bf16, fp8_bi and fp8_bi_wblocks taking turns, eager and graphed; the SM
# clock and power sampled beside it (smi_TOKENS.csv). Call 2 found the H100's SM clock falling from 1980 to
# 1470-1600 MHz under sustained load, so one variant's time depends on when it ran; in turns, every variant sees
# the same drift.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
tokens=${1:-8192}
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 \
  > "$OUT/smi_$tokens.csv" 2>&1 &
smi=$!
timeout ${LINEAR_S:-420} python3 -c "from precision_engine.cli.app import main; main()" bench linear \
  --tokens "$tokens" --variants bf16,fp8_bi,fp8_bi_wblocks --rounds 3 --out "$OUT/linear_$tokens.json" \
  > "$OUT/linear_$tokens.txt" 2>&1
echo "bench linear rc=$?"
kill $smi
grep -E "target met|DeepGEMM" "$OUT/linear_$tokens.txt" | cut -c1-700
