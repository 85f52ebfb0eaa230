#!/usr/bin/env bash
# Call 5 (sixteenth session): tune the chain launch's configs on the narrow weights (chain_tune.py).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
timeout 480 python3 benchmarks/2026-12-03/s16_calls/chain_tune.py "$OUT/tune.json" > "$OUT/tune.log" 2>&1
echo "tune rc=$?"; grep -v "^\s*$" "$OUT/tune.log" | grep -v Warning | tail -n 30 | cut -c1-1500
