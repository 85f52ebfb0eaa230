#!/usr/bin/env bash
# Thirty-eighth session's third call (carry .whl and .dg; about 8 minutes): the blocks re-quantizer's warps (2, 4
# and 8; the default now 4), then `bench linear` at 8192 and 16384 tokens with fp8_bi and fp8_bi_wblocks (x^T in
# blocks in the wgrad) against BF16, then the 8B block with the three policies again.
set -u
cd "$(dirname "$0")/../../.."
here=benchmarks/2026-12-06/s38_calls
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
timeout 80 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep --reps 30 \
  --only "requant fp8 -> blocks,requant blocks" --out "$OUT/quant.json" > "$OUT/quant.txt" 2>&1; echo "quant rc=$?"
grep -E "requant|copy" "$OUT/quant.txt" | cut -c1-100
timeout 330 python3 -c "from precision_engine.cli.app import main; main()" bench linear --tokens 8192,16384 \
  --variants bf16,fp8_bi,fp8_bi_wblocks --out "$OUT/bench_linear.json" > "$OUT/bench_linear.txt" 2>&1
echo "bench linear rc=$?"; grep -E "target met|DeepGEMM" "$OUT/bench_linear.txt" | cut -c1-600
timeout 100 python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
  --policy bf16_baseline --policy jetrl_unified --policy $here/jetrl_unified_wgrad_blocks.yaml \
  --out "$OUT/block.json" > "$OUT/block.txt" 2>&1; echo "block rc=$?"
grep -E "^(policy|bf16|jetrl|bench|.*wgrad_blocks.yaml +(fast|batch))" "$OUT/block.txt" | cut -c1-150
