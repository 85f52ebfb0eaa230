#!/usr/bin/env bash
# Prepared in the twenty-seventh session, for the next one (carry .whl): whether the chain decode's M <= 8 speed
# depends on the schedule ptxas happens to give it (ptxas_spread.py: 8 fresh compiles, then one under
# `setarch -R`). About 5 minutes.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 420 python3 benchmarks/2026-12-05/s27_calls/ptxas_spread.py 8 2>&1 | grep -v "Warning\|warn(" | tee "$OUT/spread.txt" | cut -c1-400
