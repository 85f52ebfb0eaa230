#!/usr/bin/env bash
# Forty-second session, call 3 (carry .whl and .dg): the chain decode's bits on the standalone k/v with its new
# launch (narrow 8-row tiles at every M), then decode in rounds (`bench linear --tokens 1..64 --variants
# bf16,fp8_bi --rounds 3`) and, on an H200 only, torchao beside fp8_bi_wblocks in turns at 8192 tokens.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
gpu_tests chain 300 tests/numerics/gpu/test_gemm_gpu.py -k "chain_decode_gives and 1024"
precision=(python3 -c "from precision_engine.cli.app import main; main()")
timeout ${DECODE_S:-200} "${precision[@]}" bench linear --tokens 1,8,16,24,32,40,48,56,64 --variants bf16,fp8_bi \
  --rounds 3 --out "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
echo "decode rc=$?"; grep -E "target met|1024x4096" "$OUT/decode.txt" | cut -c1-300
case "$card" in
  *H200*)
    source scripts/device_deep_gemm.sh
    PYTHONPATH=/tmp/ao:$PYTHONPATH timeout ${TORCHAO_S:-250} "${precision[@]}" bench linear --tokens 8192 \
      --variants bf16,fp8_bi_wblocks,torchao,torchao_triton --out "$OUT/torchao.json" > "$OUT/torchao.txt" 2>&1
    echo "torchao rc=$?"; grep -E "ahead|target met" "$OUT/torchao.txt" | cut -c1-400 ;;
esac
