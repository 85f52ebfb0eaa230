#!/usr/bin/env bash
# Twenty-eighth session, call F (carry .whl): gate_chain.py, 14336x4096 decode on AUTO's launch and on the chain.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 170 python3 benchmarks/2026-12-05/s28_calls/gate_chain.py "$OUT/gate_chain.json" 2>&1 \
  | grep -v "Warning\|warn(" | tee "$OUT/gate_chain.txt" | tail -n 14 | cut -c1-250
