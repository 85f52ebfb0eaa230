#!/usr/bin/env bash
# Fifty-third session, call 8 (carry .whl): on an H200 `call7.sh`; on any other card (about 40 s) `between.py`.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
case "$card" in *H200*) exec bash benchmarks/2026-12-07/s53_calls/call7.sh ;; esac
source scripts/device_env.sh
timeout 150 python3 benchmarks/2026-12-07/s53_calls/between.py 30 > "$OUT/between.txt" 2>&1
echo "between rc=$?"; cut -c1-160 "$OUT/between.txt" | grep -v Warning
