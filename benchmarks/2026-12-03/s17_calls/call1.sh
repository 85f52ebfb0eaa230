#!/usr/bin/env bash
# Call 1 (seventeenth session): every cuBLASLt algorithm for the step's three GEMMs; the eager host time.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
D=benchmarks/2026-12-03/s17_calls
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
timeout 300 python3 $D/algo_probe.py 8192 2>&1 | grep -v "^\[W\|Warning\|warn(" > "$OUT/algo_probe.txt"
timeout 150 python3 $D/host_probe.py 2>&1 | grep -v "^\[W\|Warning\|warn(" > "$OUT/host_probe.txt"
grep "host ms" "$OUT/host_probe.txt"
grep -A40 "^ *shape" "$OUT/algo_probe.txt"
