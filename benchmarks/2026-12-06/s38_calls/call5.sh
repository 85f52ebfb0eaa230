#!/usr/bin/env bash
# Thirty-eighth session's fifth call (carry .whl; about 4 minutes, no DeepGEMM): the Gluon program for x^T in
# 128x128 blocks (`gluon_requant.requantize_blocks_transposed`, AUTO's for fp32 scales on Hopper) bitwise against
# the reference, its bandwidth beside the Triton kernel's, then the Gluon tokens re-quantizer's tests (the program
# both share gained the blocks constexpr).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_tests quant_blocks 60 tests/numerics/gpu/test_quant_gpu.py -k blocks_requantizer
timeout 60 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep --reps 30 \
  --only "requant fp8 -> blocks,requant blocks" --out "$OUT/quant.json" > "$OUT/quant.txt" 2>&1; echo "quant rc=$?"
grep -E "requant|copy" "$OUT/quant.txt" | cut -c1-100
gpu_tests gluon_requant 100 tests/numerics/gpu/test_quant_gpu.py -k gluon_requantizer
