#!/usr/bin/env bash
# Call 4 (fifteenth session): the relay, a one-chain decode with split-K parallelism (relay_probe.py)
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
timeout 520 python3 benchmarks/2026-12-03/s15_calls/relay_probe.py "$OUT/relay.json" > "$OUT/probe.log" 2>&1
echo "probe rc=$?"; grep -v "^\s*$" "$OUT/probe.log" | grep -v Warning | tail -n 60 | cut -c1-1500
