#!/usr/bin/env bash
# Thirty-eighth session's first call (carry .whl and .dg; about 7 minutes): the wgrad GEMM in the 128x1-pair and
# the blocks form, with each form's re-quantizer (probe_wgrad_blocks.py); the linear's GPU tests with the new
# wgrad_input test; the 8B block under bf16_baseline, jetrl_unified and jetrl_unified with wgrad_input; then the
# op and Python stack behind the batch-invariant step's `elementwise_kernel<128, 4` launches (profile_block.py).
set -u
cd "$(dirname "$0")/../../.."
here=benchmarks/2026-12-06/s38_calls
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
timeout 170 python3 $here/probe_wgrad_blocks.py > "$OUT/probe_wgrad_blocks.txt" 2>&1; echo "probe rc=$?"
tail -n 16 "$OUT/probe_wgrad_blocks.txt"
gpu_tests linear 120 tests/numerics/gpu/test_linear_gpu.py
timeout 200 python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
  --policy bf16_baseline --policy jetrl_unified --policy $here/jetrl_unified_wgrad_blocks.yaml \
  --out "$OUT/block.json" > "$OUT/block.txt" 2>&1; echo "block rc=$?"
grep -E "^(policy|bf16|jetrl|bench|.*wgrad_blocks.yaml +(fast|batch))" "$OUT/block.txt" | cut -c1-150
[ -n "${NO_TRACE:-}" ] && exit 0
TRACE='elementwise_kernel<128, 4' timeout 100 python3 benchmarks/2026-12-06/s37_calls/profile_block.py \
  > "$OUT/trace_elementwise.txt" 2>&1; echo "trace rc=$?"
grep -E "^==|launched by" "$OUT/trace_elementwise.txt" | cut -c1-400 | head -n 20
