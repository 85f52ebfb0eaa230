#!/usr/bin/env bash
# Call 1 (twenty-second session): the chain decode's K splits: their bits (GPU test, every launch choice), then
# split_tune.py on the narrow weights; and the twenty-first session's refactors not yet run on a GPU (capture
# path, fused linear, the RL GPU tests).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
T="python3 -m pytest -q -rf -m gpu -p no:cacheprovider -x"
timeout 150 $T tests/numerics/gpu/test_gemm_gpu.py -k chain_decode > "$OUT/tests_chain.log" 2>&1
echo "chain tests rc=$?"; grep -E "passed|failed|FAILED|Error|assert" "$OUT/tests_chain.log" | tail -n 8 | cut -c1-400
timeout 270 python3 benchmarks/2026-12-04/s22_calls/split_tune.py "$OUT/tune.json" > "$OUT/tune.log" 2>&1
echo "tune rc=$?"; grep -v "^\s*$" "$OUT/tune.log" | grep -v Warning | tail -n 30 | cut -c1-700
timeout 120 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/numerics/gpu/test_graph_capture_gpu.py \
  tests/numerics/test_fused_linear.py tests/rl/gpu > "$OUT/tests_rest.log" 2>&1
echo "rest tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_rest.log" | tail -n 8 | cut -c1-300
