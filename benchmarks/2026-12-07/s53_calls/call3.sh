#!/usr/bin/env bash
# Fifty-third session, call 3 (carry .whl; about a minute with the start): what slows the ring behind itself
# (`after_what.py`).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
source scripts/device_env.sh
timeout 240 python3 benchmarks/2026-12-07/s53_calls/after_what.py 30 > "$OUT/after_what.txt" 2>&1
echo "after_what rc=$?"; cut -c1-160 "$OUT/after_what.txt" | grep -v Warning
