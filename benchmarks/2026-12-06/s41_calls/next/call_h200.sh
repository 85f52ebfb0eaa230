#!/usr/bin/env bash
# Prepared in the forty-first session (carry .whl and .dg; about 9 minutes; meant for an H200): decode in rounds,
# then torchao's Float8BlockwiseLinear beside fp8_bi_wblocks in turns at 8192 tokens (TORCHAO_S bounds it; each row
# is written to the JSON as it comes).
set -u
cd "$(dirname "$0")/../../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
precision=(python3 -c "from precision_engine.cli.app import main; main()")
timeout 150 "${precision[@]}" bench linear --tokens 1,8,16,24,32,40,48,56,64 --variants bf16,fp8_bi --rounds 3 \
  --out "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
echo "decode rc=$?"; grep -E "target met" "$OUT/decode.txt" | cut -c1-600
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout ${TORCHAO_S:-330} "${precision[@]}" bench linear --tokens 8192 \
  --variants bf16,fp8_bi_wblocks,torchao,torchao_triton --out "$OUT/torchao.json" > "$OUT/torchao.txt" 2>&1
echo "torchao rc=$?"; grep -E "ahead|target met" "$OUT/torchao.txt" | cut -c1-400
