#!/usr/bin/env bash
# Prepared for the next device session (carry .whl and .dg; about 9 minutes; meant for an H200, where issue 12's
# targets are set, and valid on an H100): the re-quantizers against copy (both layouts, AUTO's Gluon programs beside
# the Triton kernels); `bench linear` with fp8_bi and fp8_bi_wblocks at 8192 and 16384 tokens; the 8B block under
# bf16_baseline, jetrl_unified and jetrl_unified_wgrad_blocks. TORCHAO=1 instead times fp8_bi_wblocks beside torchao's
# Float8BlockwiseLinear (its first calls autotune for minutes: give it a call of its own).
set -u
cd "$(dirname "$0")/../../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
precision=(python3 -c "from precision_engine.cli.app import main; main()")
if [ -n "${TORCHAO:-}" ]; then
  PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 560 "${precision[@]}" bench linear --tokens 8192,16384 \
    --variants bf16,fp8_bi_wblocks,torchao,torchao_triton --out "$OUT/bench_linear_torchao.json" \
    > "$OUT/bench_linear_torchao.txt" 2>&1
  echo "bench linear rc=$?"; grep -E "target met|ahead|DeepGEMM" "$OUT/bench_linear_torchao.txt" | cut -c1-600
  exit 0
fi
timeout 90 "${precision[@]}" bench quant --reps 30 --only "requant" --out "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "quant rc=$?"; grep -E "requant|copy" "$OUT/quant.txt" | cut -c1-100
timeout 330 "${precision[@]}" bench linear --tokens 8192,16384 --variants bf16,fp8_bi,fp8_bi_wblocks \
  --out "$OUT/bench_linear.json" > "$OUT/bench_linear.txt" 2>&1
echo "bench linear rc=$?"; grep -E "target met|DeepGEMM" "$OUT/bench_linear.txt" | cut -c1-600
timeout 110 "${precision[@]}" bench block --reps 10 --policy bf16_baseline --policy jetrl_unified \
  --policy jetrl_unified_wgrad_blocks --out "$OUT/block.json" > "$OUT/block.txt" 2>&1; echo "block rc=$?"
grep -E "^(policy|bf16|jetrl)" "$OUT/block.txt" | cut -c1-150
