#!/usr/bin/env bash
# Thirty-seventh session (carry .whl and .dg; about 5 minutes): the batch-invariant attention with the blocks every
# row of a tile sees whole walked without masks (s36 next/attention_whole_blocks.patch, its masked pass now masking
# the scores before the multiplier: the s36 patch's unmasked pass contracted the multiplier into exp2's FMA and the
# masked one did not, so decode and prefill differed at row 63) and 3 stages for the full forward:
#   1. probe_attention_tiles.py: launches, bits against the default launch and decode at tile edges;
#   2. the GPU attention, decoder and engine tests (TESTS, TESTS_S change them);
#   3. the 8B block in both modes, on HEAD's attention file and on this tree's (with DeepGEMM unless NO_DG=1);
#      HEAD's file is made before the call: git show 87ec510:precision_engine/numerics/triton_attention.py >
#      $here/ta_head.py.txt (the device's copy has no git history);
#   4. profile_host.py: where the FP8 linear's eager fwd+bwd spends host time.
set -u
cd "$(dirname "$0")/../../.."
here=benchmarks/2026-12-06/s37_calls
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 $here/probe_attention_tiles.py > "$OUT/tiles.txt" 2>&1; echo "probe rc=$?"; tail -n 13 "$OUT/tiles.txt"
gpu_tests tests ${TESTS_S:-200} ${TESTS:-tests/numerics/gpu/test_triton_invariant_gpu.py tests/numerics/gpu/test_attention_quant_gpu.py tests/numerics/gpu/test_triton_attention_fast_gpu.py tests/numerics/gpu/test_triton_attention_fp8kv_gpu.py tests/rl/gpu/test_engine_gpu.py}
[ -z "${NO_DG:-}" ] && source scripts/device_deep_gemm.sh
cp precision_engine/numerics/triton_attention.py /tmp/ta_tree.py
for tree in ${TREES:-head tree}; do
  [ $tree = head ] && cp $here/ta_head.py.txt precision_engine/numerics/triton_attention.py
  [ $tree = tree ] && cp /tmp/ta_tree.py precision_engine/numerics/triton_attention.py
  timeout ${BLOCK_S:-140} python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
    --policy bf16_baseline --policy jetrl_unified --out "$OUT/block_$tree.json" > "$OUT/block_$tree.txt" 2>&1
  echo "$tree rc=$?"; grep -E "^(bf16_baseline|jetrl_unified) +(fast|batch)|^jetrl.*target" "$OUT/block_$tree.txt" | cut -c1-160
done
cp /tmp/ta_tree.py precision_engine/numerics/triton_attention.py
timeout 90 python3 $here/profile_host.py > "$OUT/profile_host.txt" 2>&1; echo "profile rc=$?"; head -n 3 "$OUT/profile_host.txt"
