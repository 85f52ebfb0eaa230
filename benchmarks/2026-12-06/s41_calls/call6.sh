#!/usr/bin/env bash
# Forty-first session, call 6 (carry .whl and .dg): host_profile.py, the eager fp8_bi_wblocks step's host time
# by function (cProfile), for the host-bound eager rows.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
timeout 120 python3 benchmarks/2026-12-06/s41_calls/host_profile.py > "$OUT/host_profile.txt" 2>&1
echo "profile rc=$?"; head -n 3 "$OUT/host_profile.txt"
