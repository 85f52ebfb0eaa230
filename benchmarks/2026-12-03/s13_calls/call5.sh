#!/usr/bin/env bash
# Call 5 (thirteenth session): the final state's GPU tests (every numerics GPU test, the offline sm_90 compile
# tests under the image's Triton 3.6, the rollout engine's on-policy tests), then the 8B block.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
CLI="from precision_engine.cli.app import main; main()"
timeout 280 python3 -m pytest -q -p no:cacheprovider tests/numerics/gpu tests/numerics/test_fused_linear.py \
  tests/numerics/test_gluon_compile.py tests/numerics/test_pdl.py \
  "tests/numerics/test_triton_quant.py::test_the_quotient_negates_without_subtracting" \
  > "$OUT/test_numerics.log" 2>&1 &
timeout 280 python3 -m pytest -q -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
grep -E "passed|failed|FAILED|Error" "$OUT/test_numerics.log" | tail -n 12
grep -E "passed|failed|FAILED|Error" "$OUT/test_engine.log" | tail -n 6
timeout 150 python3 -c "$CLI" bench block --reps 10 --policy bf16_baseline --policy jetrl_unified \
  --out "$OUT/bench_block.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/block.txt" | tail -n 12
