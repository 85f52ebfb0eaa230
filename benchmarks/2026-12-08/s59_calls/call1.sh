#!/usr/bin/env bash
# Fifty-ninth session, call 1 (carry .whl), on an H200 only: `bench linear` at 16,384 tokens, ours beside torchao's
# Float8BlockwiseLinear and its Triton variant, in turns (the forty-seventh session ran 8,192; torchao's autotuning
# took 203 + 72 s there, so this call has the whole 590 s).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
only_on H200
source scripts/device_env.sh
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 570 python3 -c "from precision_engine.cli.app import main; main()" \
  bench linear --tokens 16384 --variants bf16,fp8_bi_wblocks,torchao,torchao_triton --out "$OUT/linear_16384.json" \
  > "$OUT/linear_16384.txt" 2>&1
echo "bench linear rc=$?"; grep -v Warning "$OUT/linear_16384.txt" | tail -n 45 | cut -c1-200
