#!/usr/bin/env bash
# Forty-sixth session, call 2 (carry .whl and .dg): on an H200, decode in rounds and torchao in turns
# (`s42_calls/call6.sh` with SWAP=0 TORCHAO=1); on an H100, the narrow-weight launches' trips and wgmmas in
# flight (`s45_calls/config_probe.py`; call 1 settled their ring depth at 12 slots).
set -u
cd "$(dirname "$0")/../../.."
card=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$card" in
  *H200*) SWAP=0 TORCHAO=1 bash benchmarks/2026-12-06/s42_calls/call6.sh; exit 0 ;;
esac
source scripts/device_env.sh
echo "$card"
timeout ${PROBE_S:-150} python3 benchmarks/2026-12-06/s45_calls/config_probe.py --shapes 1024x4096,4096x4096 \
  --tokens 1,64 --variants n:trip=8,n:trip=2+ahead=1,n:ahead=2,n:ahead=1 --rounds 3 2>&1 | grep -v Warning \
  | tee "$OUT/trips.txt"
echo "probe rc=${PIPESTATUS[0]}"
