#!/usr/bin/env bash
# Call 5 (fourteenth session): the batch-invariant linear on Triton (fp8_bi) and on the pinned cuBLAS kernel
# (fp8_bi_pinned) in one run, --quick shapes, training and decode sizes; the last of the session's device time.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
CLI="from precision_engine.cli.app import main; main()"
timeout 130 python3 -c "$CLI" bench linear --quick --tokens 8192,1,64 --variants bf16,fp8_bi,fp8_bi_pinned \
  --out "$OUT/bench_linear.json" 2>&1 | grep -v "^\[W\|Warning\|warn(\|return Variable" > "$OUT/linear.txt"
echo "rc=$?"; cut -c1-120 "$OUT/linear.txt" | tail -n 16
