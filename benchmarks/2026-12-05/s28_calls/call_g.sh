#!/usr/bin/env bash
# Prepared in the twenty-eighth session for the next device session (carry .whl), on main as it lands: the Triton
# decode launch's scales loaded one block ahead (prefetch_ab.py: GPU bits tests on the patched copy, then main
# against patched, alternating), then the chain launch on 14336x4096 (gate_chain.py). About 6 minutes.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 420 python3 benchmarks/2026-12-05/s28_calls/prefetch_ab.py "$OUT/prefetch_ab.json" 2>&1 \
  | grep -v "Warning\|warn(" | tee "$OUT/prefetch_ab.txt" | cut -c1-400
timeout 170 python3 benchmarks/2026-12-05/s28_calls/gate_chain.py "$OUT/gate_chain.json" 2>&1 \
  | grep -v "Warning\|warn(" | tee "$OUT/gate_chain.txt" | tail -n 10 | cut -c1-250
