#!/usr/bin/env bash
# Twenty-eighth session, call E (carry .whl): swapped_sweep.py, the weight on wgmma's narrow side below 33 tokens.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 300 python3 benchmarks/2026-12-05/s28_calls/swapped_sweep.py "$OUT/swapped_sweep.json" 2>&1 \
  | grep -v "Warning\|warn(" | tee "$OUT/swapped_sweep.txt" | tail -n 25 | cut -c1-250
