#!/usr/bin/env bash
# Call 3 (thirteenth session): the host's time in an eager training step (cProfile) and the kernels of a graphed
# one, ours beside torchao at 4096x4096 (the row ours trails graphed, and where every FP8 variant is host-bound).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 400 python3 benchmarks/2026-12-03/s13_calls/host_profile.py "$OUT" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" > "$OUT/host_profile.txt"
echo "rc=$?"; cat "$OUT/host_profile.txt" | cut -c1-150 | tail -n 110
