#!/usr/bin/env bash
# Call 7 (twenty-first session): the eager FP8 step's host time, by Python function (profile_host.py, beside
# this script), without DeepGEMM and with it.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 100 python3 benchmarks/2026-12-04/s21_calls/profile_host.py > "$OUT/host_no_dg.txt" 2>&1
echo "no dg rc=$?"; grep -E "^host|^deep" "$OUT/host_no_dg.txt"
source scripts/device_deep_gemm.sh
timeout 100 python3 benchmarks/2026-12-04/s21_calls/profile_host.py > "$OUT/host_dg.txt" 2>&1
echo "dg rc=$?"; grep -E "^host|^deep" "$OUT/host_dg.txt"
grep -A50 "Ordered by: internal" "$OUT/host_dg.txt" | cut -c1-150 | head -60
