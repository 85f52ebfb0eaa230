#!/usr/bin/env bash
# Call 7 (seventeenth session): `bench linear --quick` at 8192 tokens with the host / GPU column (bf16, fp8_bi).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
CLI="from precision_engine.cli.app import main; main()"
timeout 95 python3 -c "$CLI" bench linear --quick --tokens 8192 --variants bf16,fp8_bi \
  --out "$OUT/linear_quick.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/linear_quick.txt" | tail -n 6
