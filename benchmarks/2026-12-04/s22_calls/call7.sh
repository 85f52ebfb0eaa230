#!/usr/bin/env bash
# Call 7 (twenty-second session): two chain-decode programs per SM (occupancy_probe.py); then the GPU tests call 6
# ran out of time on (the chain decode's bits, the engine's on-policy decode).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 150 python3 benchmarks/2026-12-04/s22_calls/occupancy_probe.py "$OUT/occ.json" > "$OUT/occ.log" 2>&1
echo "probe rc=$?"; grep -v "^\s*$" "$OUT/occ.log" | grep -v Warning | tail -n 17 | cut -c1-300
T="python3 -m pytest -q -rf -m gpu -p no:cacheprovider"
timeout 120 $T tests/numerics/gpu/test_gemm_gpu.py -k chain_decode > "$OUT/tests_chain.log" 2>&1
echo "chain tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_chain.log" | tail -n 8 | cut -c1-300
timeout 120 $T tests/rl/gpu > "$OUT/tests_rl.log" 2>&1
echo "rl tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_rl.log" | tail -n 8 | cut -c1-300
