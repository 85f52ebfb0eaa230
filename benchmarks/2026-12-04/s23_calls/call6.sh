#!/usr/bin/env bash
# Call 6: round 2 of wn_probe.py (the fused qkv and 12288 rows at M = 64, two programs an SM), then the GPU
# tests of what landed (ccd5f66): the chain bits with chain_config's narrow weight tiles as the default above 32
# tokens, the RL GPU tests (rollout logprobs bitwise the trainer's), the ptxas checks on this Triton.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 100 python3 benchmarks/2026-12-04/s23_calls/wn_probe.py "$OUT/wn2.json" --round 2 > "$OUT/wn2.log" 2>&1
echo "probe rc=$?"; grep -E "M=|done|Error" "$OUT/wn2.log" | cut -c1-330
T="python3 -m pytest -q -rf -p no:cacheprovider"
timeout 150 $T -m gpu tests/numerics/gpu/test_gemm_gpu.py -k chain_decode > "$OUT/tests_chain.log" 2>&1
echo "chain tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_chain.log" | tail -n 6 | cut -c1-300
timeout 150 $T -m gpu tests/rl/gpu > "$OUT/tests_rl.log" 2>&1
echo "rl gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_rl.log" | tail -n 6 | cut -c1-300
timeout 60 $T tests/numerics/test_gluon_compile.py > "$OUT/tests_compile.log" 2>&1
echo "compile tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_compile.log" | tail -n 4 | cut -c1-300
