#!/usr/bin/env bash
# Prepared for the next device session (carry .whl and .dg; about 4 minutes): graph_vs_eager.py with nvidia-smi
# sampling the SM clock and power every 100 ms beside it (smi.csv; graph_vs_eager.txt's "phase" lines give each
# phase's wall-clock start).
set -u
cd "$(dirname "$0")/../../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
source scripts/device_deep_gemm.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 100 \
  > "$OUT/smi.csv" 2>&1 &
smi=$!
timeout 300 python3 benchmarks/2026-12-06/s39_calls/next/graph_vs_eager.py > "$OUT/graph_vs_eager.txt" 2>&1
echo "rc=$?"
kill $smi
grep -v "^phase" "$OUT/graph_vs_eager.txt" | tail -n 8
