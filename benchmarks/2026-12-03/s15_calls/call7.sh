#!/usr/bin/env bash
# Call 7 (fifteenth session): AUTO's batch-invariant linear at 8192 tokens on every 8B shape (the one-segment
# weights' prefill on pinned cuBLAS), against BF16 in the same run.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
CLI="from precision_engine.cli.app import main; main()"
timeout 250 python3 -c "$CLI" bench linear --tokens 8192 --variants bf16,fp8_bi \
  --out "$OUT/bench_linear.json" 2>&1 | grep -v "^\[W\|Warning\|warn(\|return Variable" > "$OUT/linear.txt"
echo "bench rc=$?"; cut -c1-110 "$OUT/linear.txt" | tail -n 40
