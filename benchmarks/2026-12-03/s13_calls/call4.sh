#!/usr/bin/env bash
# Call 4 (thirteenth session): the column-split Gluon schedule on a ring of slot pairs (half the barrier
# operations, so half the bar.syncs a warpgroup waits at) against the shipped schedules, bitwise-checked, twice.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
for run in 1 2; do
  timeout 150 python3 scripts/gluon_sweep.py "$OUT/gluon_sweep_$run.json" > "$OUT/gluon_sweep_$run.txt" 2>&1
  echo "sweep $run rc=$?"; tail -n 16 "$OUT/gluon_sweep_$run.txt"
done
