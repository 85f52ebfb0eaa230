#!/usr/bin/env bash
# Forty-eighth session, call 2 (carry .whl), for an H200 only: call 1 cut to what fits the device time left after
# ten asks that got no machine: the swap probe on 4096x4096 and the fused qkv (`s42_calls/swap_probe.py`), then
# the Gluon re-quantizer's programs against AUTO's and a copy of the same bytes (`bench quant --sweep`).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
only_on H200
source scripts/device_env.sh
timeout ${SWAP_S:-200} python3 benchmarks/2026-12-06/s42_calls/swap_probe.py --shapes 4096x4096,6144x4096 \
  --tokens 1,8,16,24,32 --rounds 3 2>&1 | grep -v Warning | tee "$OUT/swap.txt"
echo "swap rc=${PIPESTATUS[0]}"
precision=(python3 -c "from precision_engine.cli.app import main; main()")
timeout ${SWEEP_S:-100} "${precision[@]}" bench quant --reps 30 --sweep \
  --only "requant fp8 -,requant fp8 triton kernel,requant gluon w" --out "$OUT/requant_sweep.json" \
  > "$OUT/requant_sweep.txt" 2>&1
echo "sweep rc=$?"; grep -E "requant|copy" "$OUT/requant_sweep.txt" | cut -c1-140
