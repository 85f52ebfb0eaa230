#!/usr/bin/env bash
# Thirty-third session, call C (carry .whl; under a minute), for an H200, issue 12's card: `precision bench quant`
# on the re-quantizer's rows only (AUTO, the Triton kernel, the copy of its bytes), the target line last.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 -c "from precision_engine.cli.app import main; main()" bench quant --reps 30 \
  --only "requant fp8 -,requant fp8 triton kernel" --out "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "quant rc=$?"; tail -n 14 "$OUT/quant.txt" | cut -c1-200
