#!/usr/bin/env bash
# Forty-fifth session, call 4 (carry .whl; any Hopper card): deeper rings for chain_config's narrow-weight
# launches (the standalone k/v's 8-row tiles at every M, 32/48-row tiles above 32 tokens), and 64-row tiles
# there (half the programs, so x is read from the L2 half as often), `config_probe.py`.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout ${PROBE_S:-400} python3 benchmarks/2026-12-06/s45_calls/config_probe.py \
  --shapes 1024x4096,4096x4096,6144x4096 --tokens 1,24,48,64 \
  --variants n:stages=16,n:stages=24,n:weight_rows=64,n:weight_rows=64+stages=16 ${PROBE_ARGS:-} 2>&1 \
  | grep -v Warning | tee "$OUT/stages.txt"
echo "probe rc=${PIPESTATUS[0]}"
