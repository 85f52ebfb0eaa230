#!/usr/bin/env bash
# Call 6 (twenty-first session): this session's code on the GPU (the decode ceiling's read kernel and its test,
# the block quantizer's launch config), then the 8B decoder block, BF16 against jetrl_unified, with DeepGEMM:
# the block target's stand on the current code.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
source scripts/device_deep_gemm.sh
T="python3 -m pytest -q -rf -m gpu -p no:cacheprovider"
timeout 150 $T tests/bench/test_bench_decode_ceiling.py tests/numerics/gpu/test_quant_gpu.py -k "ceiling or blocks or stacked" \
  > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests.log" | tail -n 6 | cut -c1-300
timeout 300 python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
  --policy bf16_baseline --policy jetrl_unified --mode batch-invariant --out "$OUT/bench_block.json" \
  > "$OUT/bench_block.txt" 2>&1
echo "block rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/bench_block.txt" | tail -n 14 | cut -c1-220
