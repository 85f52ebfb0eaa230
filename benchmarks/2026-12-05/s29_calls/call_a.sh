#!/usr/bin/env bash
# Twenty-ninth session, call A (carry .whl): the chain launch on the wide weights (wide_chain.py), then the whole
# linear's decode table on main (`precision bench ceiling --decode`), M = 1..64 in steps of 8.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 benchmarks/2026-12-05/s29_calls/wide_chain.py "$OUT/wide_chain.json" 2>&1 \
  | grep -v "Warning\|warn(" | tee "$OUT/wide_chain.txt" | cut -c1-250
timeout 330 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling --decode \
  --tokens 1,8,16,24,32,40,48,56,64 --out "$OUT/decode.json" 2>&1 | grep -v "Warning\|warn(" | tee "$OUT/decode.txt" | tail -n 40 | cut -c1-250
