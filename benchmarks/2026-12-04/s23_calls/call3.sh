#!/usr/bin/env bash
# Call 3: the early weight tiles (EARLY_WEIGHTS) A/B in the whole linear, then the chain bits (GPU tests).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 200 python3 benchmarks/2026-12-04/s23_calls/early_probe.py "$OUT/early.json" > "$OUT/early.log" 2>&1
echo "probe rc=$?"; grep -E "M=|Error|error" "$OUT/early.log" | cut -c1-260
T="python3 -m pytest -q -rf -m gpu -p no:cacheprovider"
timeout 200 $T tests/numerics/gpu/test_gemm_gpu.py -k chain_decode > "$OUT/tests_chain.log" 2>&1
echo "chain tests rc=$?"; grep -E "passed|failed|FAILED|Error|assert" "$OUT/tests_chain.log" | tail -n 8 | cut -c1-300
