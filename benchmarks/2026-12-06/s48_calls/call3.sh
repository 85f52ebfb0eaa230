#!/usr/bin/env bash
# Forty-eighth session, call 3 (carry .whl), for an H200 only, with the last 269 s of device time: the swap probe
# alone on 4096x4096 and the fused qkv at M = 8, 16, 32, two rounds.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
only_on H200
source scripts/device_env.sh
timeout ${SWAP_S:-150} python3 benchmarks/2026-12-06/s42_calls/swap_probe.py --shapes 4096x4096,6144x4096 \
  --tokens 8,16,32 --rounds 2 2>&1 | grep -v Warning | tee "$OUT/swap.txt"
echo "swap rc=${PIPESTATUS[0]}"
