#!/usr/bin/env bash
# Forty-third session, call 3 (carry .whl and .dg; any Hopper card): `bench block` with every policy and mode on a
# layer of its own, timed in turns call by call (new this session): `--quick` on the GPU (graphs included), then
# the 8B block (three policies, both modes, two rounds) with DeepGEMM; on an H200, torchao beside fp8_bi_wblocks
# in turns at 8192 tokens.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
precision=(python3 -c "from precision_engine.cli.app import main; main()")
timeout 120 "${precision[@]}" bench block --quick --out "$OUT/block_quick.json" > "$OUT/block_quick.txt" 2>&1
echo "block quick rc=$?"; tail -n 4 "$OUT/block_quick.txt" | cut -c1-200
timeout ${BLOCK_S:-240} "${precision[@]}" bench block --reps 10 --rounds 2 --policy bf16_baseline \
  --policy jetrl_unified --policy jetrl_unified_wgrad_blocks --out "$OUT/block.json" > "$OUT/block.txt" 2>&1
echo "block rc=$?"; grep -E "^(policy|bf16|jetrl)" "$OUT/block.txt" | cut -c1-160
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) ;; *) exit 0 ;; esac
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout ${TORCHAO_S:-200} "${precision[@]}" bench linear --tokens 8192 \
  --variants bf16,fp8_bi_wblocks,torchao,torchao_triton --out "$OUT/torchao.json" > "$OUT/torchao.txt" 2>&1
echo "torchao rc=$?"; grep -E "ahead|target met" "$OUT/torchao.txt" | cut -c1-400
