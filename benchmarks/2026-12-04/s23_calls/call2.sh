#!/usr/bin/env bash
# Call 2: where a whole FP8 linear's decode time goes (decompose.py), at HEAD 2aed4eb.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 400 python3 benchmarks/2026-12-04/s23_calls/decompose.py "$OUT/decompose.json"
