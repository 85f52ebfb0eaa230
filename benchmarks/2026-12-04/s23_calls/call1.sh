#!/usr/bin/env bash
# Prepared for the next session (not run: the twenty-second ended with no device time left). First, on the CPU:
#   git apply benchmarks/2026-12-04/s22_calls/two_warpgroups.patch   (and its compile tests: test_gluon_compile.py
#   passes 16 on Triton 3.6 with ptxas). Then run this as a device call: the chain bits with two MMA warpgroups a
#   program (GPU test), then wg_probe.py against the shipped launch at M = 32, 48, 64.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -m gpu -p no:cacheprovider"
timeout 200 $T tests/numerics/gpu/test_gemm_gpu.py -k chain_decode > "$OUT/tests_chain.log" 2>&1
echo "chain tests rc=$?"; grep -E "passed|failed|FAILED|Error|assert" "$OUT/tests_chain.log" | tail -n 8 | cut -c1-300
timeout 200 python3 benchmarks/2026-12-04/s22_calls/wg_probe.py "$OUT/wg.json" > "$OUT/wg.log" 2>&1
echo "probe rc=$?"; grep -E "M=|done" "$OUT/wg.log" | cut -c1-250
