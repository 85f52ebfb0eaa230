#!/usr/bin/env bash
# Forty-third session, call 5 (carry .whl; any Hopper card): what this session landed, checked: the Gluon
# launches' context made current once per launch (the context GPU tests and the Gluon bits tests), and `bench
# block` in turns (--quick, then the 8B block, two policies, both modes). Call 4 was taken back before it ended.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_tests context 100 tests/numerics/gpu/test_cuda_context_gpu.py
gpu_tests gluon 80 tests/numerics/gpu/test_gemm_gpu.py tests/numerics/gpu/test_quant_gpu.py \
  -k "chain_decode_gives and 4096-4096 or gluon_gives and 65-4096 or gluon_grad_output"
precision=(python3 -c "from precision_engine.cli.app import main; main()")
timeout 60 "${precision[@]}" bench block --quick --out "$OUT/block_quick.json" > "$OUT/block_quick.txt" 2>&1
echo "block quick rc=$?"; tail -n 3 "$OUT/block_quick.txt" | cut -c1-200
timeout ${BLOCK_S:-140} "${precision[@]}" bench block --reps 10 --policy bf16_baseline --policy jetrl_unified \
  --out "$OUT/block.json" > "$OUT/block.txt" 2>&1
echo "block rc=$?"; grep -E "^(policy|bf16|jetrl)" "$OUT/block.txt" | cut -c1-160
