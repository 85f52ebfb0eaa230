#!/usr/bin/env bash
# Call 2 (sixteenth session): the one-chain decode's ring depth and token split, graphed (chain_sweep.py).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
timeout 480 python3 benchmarks/2026-12-03/s16_calls/chain_sweep.py "$OUT/sweep.json" > "$OUT/sweep.log" 2>&1
echo "sweep rc=$?"; grep -v "^\s*$" "$OUT/sweep.log" | grep -v Warning | tail -n 30 | cut -c1-1500
