#!/usr/bin/env bash
# Forty-eighth session, call 1 (carry .whl and .dg), for an H200 only: the forty-seventh session's prepared call
# (swap probe on 4096x4096 and the fused qkv, the 8B block, the re-quantizers against copy), then every Gluon
# re-quantizer program against AUTO's and a copy of the same bytes, never swept on an H200 (the H100's sweep chose
# 8 warps x 8 token lanes; the H200 runs it at 62.5-73.9% of copy).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
only_on H200
bash benchmarks/2026-12-06/s47_calls/next/call_h200.sh
source scripts/device_env.sh
precision=(python3 -c "from precision_engine.cli.app import main; main()")
timeout ${SWEEP_S:-120} "${precision[@]}" bench quant --reps 30 --sweep \
  --only "requant fp8 -,requant fp8 triton kernel,requant gluon w" --out "$OUT/requant_sweep.json" \
  > "$OUT/requant_sweep.txt" 2>&1
echo "sweep rc=$?"; grep -E "requant|copy" "$OUT/requant_sweep.txt" | cut -c1-140
