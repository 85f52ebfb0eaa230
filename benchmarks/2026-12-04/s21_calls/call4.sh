#!/usr/bin/env bash
# Call 4 (twenty-first session): call 3's Nsight Compute run found the quantizers' occupancy limited by registers;
# time each under register caps (sweep_maxnreg.py, beside this script), bytes checked against the uncapped launch.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 400 python3 benchmarks/2026-12-04/s21_calls/sweep_maxnreg.py > "$OUT/sweep_maxnreg.txt" 2>&1
echo "sweep rc=$?"; grep -E "^\||^copy" "$OUT/sweep_maxnreg.txt" | cut -c1-160
