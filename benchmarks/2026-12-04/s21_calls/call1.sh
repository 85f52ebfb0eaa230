#!/usr/bin/env bash
# Call 1 (twenty-first session): the twentieth session's code not yet run on a GPU (compile of a 128-row weight,
# the full-size stacked-parts quantizer, the decode-ceiling bench and its test), `precision bench ceiling
# --decode`, and a kernel-by-kernel profile of graphed training steps (scripts/profile_graphed_step.py).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
source scripts/device_deep_gemm.sh
python3 -c "from precision_engine.numerics.gemm import deep_gemm_available as d; print('deep_gemm', d())"
T="python3 -m pytest -q -rf -m gpu -p no:cacheprovider"
timeout 200 $T tests/numerics/gpu/test_compile_gpu.py "tests/numerics/gpu/test_quant_gpu.py::test_stacked_parts_with_the_transposed_operand_full_size" \
  tests/bench/test_bench_decode_ceiling.py > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests.log" | tail -n 8 | cut -c1-300
timeout 150 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling --decode \
  --out "$OUT/decode_ceiling.json" > "$OUT/decode_ceiling.txt" 2>&1
echo "decode ceiling rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/decode_ceiling.txt" | tail -n 30 | cut -c1-300
timeout 150 python3 scripts/profile_graphed_step.py --shapes 28672x4096,4096x14336,6144x4096,4096x4096 \
  > "$OUT/profile_graphed.txt" 2>&1
echo "profile rc=$?"; grep -E "^===|^\|" "$OUT/profile_graphed.txt" | cut -c1-200
