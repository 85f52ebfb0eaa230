#!/usr/bin/env bash
# Forty-fifth session, call 2 (carry .whl and .dg; the shipped tree): on an H200, decode in rounds and torchao in
# turns first (`s42_calls/call6.sh`, SWAP=0 TORCHAO=1); on any card, how much of the token quantizer's exposed
# time is its read of a cold x (`hot_x_probe.py`).
set -u
cd "$(dirname "$0")/../../.."
card=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$card" in
  *H200*) SWAP=0 TORCHAO=1 DECODE_S=160 TORCHAO_S=170 bash benchmarks/2026-12-06/s42_calls/call6.sh ;;
esac
source scripts/device_env.sh
echo "$card"
timeout ${PROBE_S:-200} python3 benchmarks/2026-12-06/s45_calls/hot_x_probe.py ${PROBE_ARGS:-} 2>&1 \
  | grep -v Warning | tee "$OUT/hot_x.txt"
echo "probe rc=${PIPESTATUS[0]}"
