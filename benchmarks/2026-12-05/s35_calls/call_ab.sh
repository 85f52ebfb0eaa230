#!/usr/bin/env bash
# Thirty-fifth session (carry .whl and .dg; about 8 minutes): the 8B block in both modes, three trees on one card:
#   main     the four attention/decoder files as on main before (ab_main/, copied in: made beside this script with
#            `git show 8881811:precision_engine/<file>` for the four files below, not kept in the repository);
#   causal   this tree: teacher-forcing attention on flash (fast mode's forward, batch-invariant mode's backward);
#   fused    causal plus s34's fast_mode_fused_producers.patch (applied with sed).
# Then the GPU tests the two changes touch, on the fused tree (or those TESTS names).
set -u
cd "$(dirname "$0")/../../.."
here=benchmarks/2026-12-05/s35_calls
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
if [ -d /tmp/deep_gemm ]; then export PYTHONPATH=/tmp/deep_gemm:$PYTHONPATH DG_JIT_CACHE_DIR=/tmp/dgcache TORCH_EXTENSIONS_DIR=/tmp/torch_ext
elif [ -z "${NO_DG:-}" ]; then source scripts/device_deep_gemm.sh; fi  # NO_DG=1: without DeepGEMM (50 s saved)
files="models/decoder.py numerics/invariant.py numerics/masked_attention.py numerics/triton_attention.py"
mkdir -p /tmp/ab_causal
for f in $files; do cp precision_engine/$f /tmp/ab_causal/$(basename $f); done
use() {  # use main|causal|fused
  local from=/tmp/ab_causal; [ $1 = main ] && from=$here/ab_main
  for f in $files; do cp $from/$(basename $f) precision_engine/$f; done
  [ $1 = fused ] && sed -i 's/return self.invariant or (x.is_cuda and not torch.is_grad_enabled())/return self.invariant or x.is_cuda/' precision_engine/models/decoder.py && echo "fused: $(grep -c 'return self.invariant or x.is_cuda$' precision_engine/models/decoder.py) line"
  return 0
}
for tree in ${TREES:-main causal fused}; do
  use $tree
  timeout ${BLOCK_S:-140} python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
    --policy bf16_baseline --policy jetrl_unified --out "$OUT/block_$tree.json" > "$OUT/block_$tree.txt" 2>&1
  echo "$tree rc=$?"; grep -E "^(bf16_baseline|jetrl_unified) +(fast|batch)" "$OUT/block_$tree.txt" | cut -c1-110
done
use fused
gpu_tests tests_fused ${TESTS_S:-150} ${TESTS:-tests/numerics/gpu/test_triton_invariant_gpu.py tests/numerics/gpu/test_fused_add_norm_gpu.py tests/rl/gpu tests/models}
use causal
