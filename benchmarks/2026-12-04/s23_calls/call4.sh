#!/usr/bin/env bash
# Call 4: narrow weight tiles on wgmma's N side (ChainConfig.weight_rows): its speed against the shipped launch
# at M = 32, 48, 64 (wn_probe.py, bits against pinned cuBLAS first), then the chain bits test with its configs.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 240 python3 benchmarks/2026-12-04/s23_calls/wn_probe.py "$OUT/wn.json" > "$OUT/wn.log" 2>&1
echo "probe rc=$?"; grep -E "M=|done|Error" "$OUT/wn.log" | cut -c1-330
T="python3 -m pytest -q -rf -m gpu -p no:cacheprovider"
timeout 200 $T tests/numerics/gpu/test_gemm_gpu.py -k chain_decode > "$OUT/tests_chain.log" 2>&1
echo "chain tests rc=$?"; grep -E "passed|failed|FAILED|Error|assert" "$OUT/tests_chain.log" | tail -n 8 | cut -c1-300
