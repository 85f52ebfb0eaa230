#!/usr/bin/env bash
# Forty-eighth session (carry .whl and .dg), for an H200 only: torchao's Float8BlockwiseLinear beside
# fp8_bi_wblocks in turns at 16384 tokens, the issue's second token count, never run in turns on an H200. On
# call 1's warm machine, device_deep_gemm.sh uses call 1's DeepGEMM build again. torchao's first calls autotune
# for minutes.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
only_on H200
source scripts/device_env.sh
source scripts/device_deep_gemm.sh
precision=(python3 -c "from precision_engine.cli.app import main; main()")
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout ${TORCHAO_S:-540} "${precision[@]}" bench linear --tokens 16384 \
  --variants bf16,fp8_bi_wblocks,torchao,torchao_triton --out "$OUT/torchao16k.json" > "$OUT/torchao16k.txt" 2>&1
echo "torchao rc=$?"; grep -E "ahead|target met" "$OUT/torchao16k.txt" | cut -c1-400
