#!/usr/bin/env bash
# Call 4 (twenty-first session): call 3's Nsight Compute run found the quantizers' occupancy limited by registers;
# time each under register caps (scripts/sweep_maxnreg.py), bytes checked against the uncapped launch.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 400 python3 scripts/sweep_maxnreg.py > "$OUT/sweep_maxnreg.txt" 2>&1
echo "sweep rc=$?"; grep -E "^\||^copy" "$OUT/sweep_maxnreg.txt" | cut -c1-160
