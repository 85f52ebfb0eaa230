#!/usr/bin/env bash
# Forty-first session, call 5 (carry .whl and .dg): torchao's Float8BlockwiseLinear beside fp8_bi_wblocks in turns
# at 8192 tokens on the six shapes call 4's 270 s cut short (its torchao sweep reached 14336x4096's forward).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout ${TORCHAO_S:-480} python3 -c "from precision_engine.cli.app import main; main()" \
  bench linear --tokens 8192 --shapes 14336x4096,4096x14336,12288x4096,4096x12288,6144x4096,28672x4096 \
  --variants bf16,fp8_bi_wblocks,torchao,torchao_triton --out "$OUT/torchao.json" > "$OUT/torchao.txt" 2>&1
echo "torchao rc=$?"; grep -E "ahead|target met" "$OUT/torchao.txt" | cut -c1-400
