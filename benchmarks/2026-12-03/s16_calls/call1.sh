#!/usr/bin/env bash
# Call 1 (sixteenth session): the Gluon one-chain decode's bits against pinned cuBLAS and its speed
# against BF16 and the shipped split launch (chain_probe.py); the Gluon compile tests.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
timeout 480 python3 benchmarks/2026-12-03/s16_calls/chain_probe.py "$OUT/probe.json" > "$OUT/probe.log" 2>&1
echo "probe rc=$?"; grep -v "^\s*$" "$OUT/probe.log" | grep -v Warning | tail -n 40 | cut -c1-1500
