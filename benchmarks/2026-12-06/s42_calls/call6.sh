#!/usr/bin/env bash
# Forty-second session, call 6 (carry .whl and .dg), for an H200 only (an H100 exits at once): the narrow-tile
# launch at M <= 32 against chain_config's on the H200 (`swap_probe.py`), decode in rounds (`bench linear
# --tokens 1..64 --variants bf16,fp8_bi --rounds 3`), then with TORCHAO=1 torchao beside fp8_bi_wblocks in turns at
# 8192 tokens.
set -u
cd "$(dirname "$0")/../../.."
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
case "$card" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
source scripts/device_env.sh
[ "${SWAP:-1}" = 0 ] || timeout ${PROBE_S:-150} python3 benchmarks/2026-12-06/s42_calls/swap_probe.py --shapes 4096x4096,6144x4096 \
  --tokens 1,8,16,24,32 --rounds 2 2>&1 | tee "$OUT/swap.txt" | grep -v Warning
precision=(python3 -c "from precision_engine.cli.app import main; main()")
timeout ${DECODE_S:-170} "${precision[@]}" bench linear --tokens 1,8,16,24,32,40,48,56,64 --variants bf16,fp8_bi \
  --rounds 3 --out "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
echo "decode rc=$?"; grep -E "target met" "$OUT/decode.txt" | cut -c1-1500
[ "${TORCHAO:-0}" = 1 ] || exit 0
source scripts/device_deep_gemm.sh
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout ${TORCHAO_S:-200} "${precision[@]}" bench linear --tokens 8192 \
  --variants bf16,fp8_bi_wblocks,torchao,torchao_triton --out "$OUT/torchao.json" > "$OUT/torchao.txt" 2>&1
echo "torchao rc=$?"; grep -E "ahead|target met" "$OUT/torchao.txt" | cut -c1-400
