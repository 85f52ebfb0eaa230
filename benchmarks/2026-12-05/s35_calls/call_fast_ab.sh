#!/usr/bin/env bash
# Thirty-fifth session (carry .whl and .dg, about 6 minutes): s34's fast_mode_fused_producers.patch timed against
# main on one card, alternating main / patched twice (the 8B block, both policies, fast mode), then the GPU tests
# the patch touches, run patched. The patch is applied with sed (the device copy need not be a git checkout).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
if [ -d /tmp/deep_gemm ]; then export PYTHONPATH=/tmp/deep_gemm:$PYTHONPATH DG_JIT_CACHE_DIR=/tmp/dgcache TORCH_EXTENSIONS_DIR=/tmp/torch_ext
else source scripts/device_deep_gemm.sh; fi
decoder=precision_engine/models/decoder.py
cp $decoder /tmp/decoder_main.py
old='return self.invariant or (x.is_cuda and not torch.is_grad_enabled())'
new='return self.invariant or x.is_cuda'
for round in 1 2; do
  for side in main patched; do
    cp /tmp/decoder_main.py $decoder
    [ $side = patched ] && sed -i "s/$old/$new/" $decoder && grep -c "$new" $decoder
    timeout 100 python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
      --policy bf16_baseline --policy jetrl_unified --mode fast --out "$OUT/block_${side}_$round.json" \
      > "$OUT/block_${side}_$round.txt" 2>&1
    echo "$side $round rc=$?"; grep -E "^(bf16_baseline|jetrl_unified) +fast" "$OUT/block_${side}_$round.txt" | cut -c1-120
  done
done
gpu_tests patched_tests 150 tests/rl/gpu tests/numerics/gpu/test_fused_add_norm_gpu.py
cp /tmp/decoder_main.py $decoder
