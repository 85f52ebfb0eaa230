#!/usr/bin/env bash
# Thirty-ninth session, call A (carry .whl and .dg; about 7 minutes): the re-quantizers against copy, then the 8B
# block (bf16_baseline, jetrl_unified, jetrl_unified_wgrad_blocks; DeepGEMM) on main and on main with
# attention_backward_inputs.patch (the batch-invariant attention's backward masks in three vectorised launches).
# PATCHED=1 applies the patch first and runs only the GPU tests it needs and `bench linear` (call B).
set -u
cd "$(dirname "$0")/../../.."
here=benchmarks/2026-12-06/s39_calls
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
precision=(python3 -c "from precision_engine.cli.app import main; main()")
block() {
  timeout ${BLOCK_S:-120} "${precision[@]}" bench block --reps 10 --policy bf16_baseline --policy jetrl_unified \
    --policy jetrl_unified_wgrad_blocks --out "$OUT/block_$1.json" > "$OUT/block_$1.txt" 2>&1
  echo "block $1 rc=$?"; grep -E "^(bf16_baseline|jetrl_unified[a-z_]*) +(fast|batch)|target" "$OUT/block_$1.txt" | cut -c1-160
}
if [ -n "${PATCHED:-}" ]; then
  git apply $here/attention_backward_inputs.patch || patch -p1 < $here/attention_backward_inputs.patch || exit 4
  gpu_tests attention ${TESTS_S:-220} tests/numerics/gpu/test_triton_invariant_gpu.py \
    tests/numerics/gpu/test_attention_quant_gpu.py tests/rl/gpu/test_engine_gpu.py tests/models -k "not chain"
  timeout ${LINEAR_S:-300} "${precision[@]}" bench linear --tokens 8192,16384 --variants bf16,fp8_bi,fp8_bi_wblocks \
    --out "$OUT/bench_linear.json" > "$OUT/bench_linear.txt" 2>&1
  echo "bench linear rc=$?"; grep -E "target met|DeepGEMM" "$OUT/bench_linear.txt" | cut -c1-600
  exit 0
fi
timeout 90 "${precision[@]}" bench quant --reps 30 --only "requant" --out "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "quant rc=$?"; grep -E "requant|copy" "$OUT/quant.txt" | cut -c1-100
block main
git apply $here/attention_backward_inputs.patch || patch -p1 < $here/attention_backward_inputs.patch || exit 4
block patch
