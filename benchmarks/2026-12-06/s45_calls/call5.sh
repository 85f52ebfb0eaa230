#!/usr/bin/env bash
# Forty-fifth session, call 5 (carry .whl; the last device time): on an H200, decode in rounds on the shipped launch
# (`s42_calls/call6.sh` with SWAP=0); on an H100, shallower rings for chain_config's narrow-weight launches
# (`config_probe.py`: call 4 found deeper ones slower).
set -u
cd "$(dirname "$0")/../../.."
card=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$card" in
  *H200*) SWAP=0 DECODE_S=180 bash benchmarks/2026-12-06/s42_calls/call6.sh; exit 0 ;;
esac
source scripts/device_env.sh
echo "$card"
timeout ${PROBE_S:-120} python3 benchmarks/2026-12-06/s45_calls/config_probe.py --shapes 1024x4096,4096x4096 \
  --tokens 1,64 --variants n:stages=6,n:stages=8,n:stages=10 --rounds 3 2>&1 | grep -v Warning | tee "$OUT/shallow.txt"
echo "probe rc=${PIPESTATUS[0]}"
