#!/usr/bin/env bash
# Forty-second session, call 2 (carry .whl): the chain decode at M <= 32 with narrow weight tiles fitted to one
# wave (`swap_probe.py`), against `chain_config`'s launch.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout ${PROBE_S:-420} python3 benchmarks/2026-12-06/s42_calls/swap_probe.py --tokens ${TOKENS:-1,8,16,24,32} \
  --rounds 2 2>&1 | tee "$OUT/swap.txt" | grep -v Warning
echo "swap rc=${PIPESTATUS[0]}"
