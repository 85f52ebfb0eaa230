#!/usr/bin/env bash
# Thirtieth session, call C (carry .whl; about 4 minutes; main as it is, no patch): the narrow 8B weights' decode
# at M <= 32 on narrow weight tiles that fill one wave (narrow_probe.py), against the shipped 64-row tiles.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 480 python3 benchmarks/2026-12-05/s30_calls/narrow_probe.py "$OUT/narrow_probe.json" 2>&1 \
  | grep -v "Warning\|warn(" | tee "$OUT/narrow_probe.txt" | tail -n 30 | cut -c1-300
