#!/usr/bin/env bash
# Thirty-eighth session's second call (carry .whl and .dg; about 6 minutes): the fused blocks re-quantizer
# (`triton_quant.requantize_blocks_transposed`) bitwise on the GPU and the linear's wgrad_input test on it; its
# bandwidth against copy with its warp sweep (`bench quant`); the wgrad probe again (now with the kernel); the 8B
# block under bf16_baseline, jetrl_unified and jetrl_unified with wgrad_input.
set -u
cd "$(dirname "$0")/../../.."
here=benchmarks/2026-12-06/s38_calls
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
gpu_tests quant_blocks 150 tests/numerics/gpu/test_quant_gpu.py -k blocks_requantizer
gpu_tests linear 100 tests/numerics/gpu/test_linear_gpu.py -k wgrad_input
timeout 120 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep --reps 30 \
  --only "requant fp8 -> blocks,requant blocks,requant fp8 -> tokens,requant gluon w8 t8" --out "$OUT/quant.json" \
  > "$OUT/quant.txt" 2>&1; echo "quant rc=$?"
grep -E "requant|copy" "$OUT/quant.txt" | cut -c1-100
timeout 150 python3 $here/probe_wgrad_blocks.py > "$OUT/probe_wgrad_blocks.txt" 2>&1; echo "probe rc=$?"
tail -n 16 "$OUT/probe_wgrad_blocks.txt"
timeout 200 python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
  --policy bf16_baseline --policy jetrl_unified --policy $here/jetrl_unified_wgrad_blocks.yaml \
  --out "$OUT/block.json" > "$OUT/block.txt" 2>&1; echo "block rc=$?"
grep -E "^(policy|bf16|jetrl|bench|.*wgrad_blocks.yaml +(fast|batch))" "$OUT/block.txt" | cut -c1-150
