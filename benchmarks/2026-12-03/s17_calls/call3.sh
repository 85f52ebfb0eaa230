#!/usr/bin/env bash
# Call 3 (seventeenth session): host microseconds of each piece of an eager FP8 linear step.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
D=benchmarks/2026-12-03/s17_calls
timeout 200 python3 $D/host_pieces.py 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/host_pieces.txt"
