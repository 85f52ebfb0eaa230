#!/usr/bin/env bash
# Thirty-eighth session's fourth call (carry .whl and .dg; about 7 minutes): the quantizers' GPU tests in full (the
# tokens program gained the blocks re-quantizer's constexpr; its default is now 2 warps) and the linear's, then the
# 8B block under the shipped jetrl_unified_wgrad_blocks beside bf16_baseline and jetrl_unified.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
gpu_tests quant 260 tests/numerics/gpu/test_quant_gpu.py
gpu_tests linear 90 tests/numerics/gpu/test_linear_gpu.py
timeout 100 python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
  --policy bf16_baseline --policy jetrl_unified --policy jetrl_unified_wgrad_blocks \
  --out "$OUT/block.json" > "$OUT/block.txt" 2>&1; echo "block rc=$?"
grep -E "^(policy|bf16|jetrl)" "$OUT/block.txt" | cut -c1-150
