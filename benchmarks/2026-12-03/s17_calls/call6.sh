#!/usr/bin/env bash
# Call 6 (seventeenth session): `bench linear --quick` at 8192 tokens with the host issue column, ours beside
# torchao's Float8BlockwiseLinear (its first calls autotune for about 90 s).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext PYTHONPATH=/tmp/ao:$PYTHONPATH
CLI="from precision_engine.cli.app import main; main()"
timeout 270 python3 -c "$CLI" bench linear --quick --tokens 8192 --variants bf16,fp8_cublas,fp8_bi,torchao \
  --out "$OUT/linear_quick.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/linear_quick.txt" | tail -n 14
