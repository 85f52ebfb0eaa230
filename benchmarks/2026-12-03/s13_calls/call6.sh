#!/usr/bin/env bash
# Call 6 (thirteenth session): `bench linear --quick` beside torchao on the final state (torchao's first calls
# autotune for about 100 s).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
CLI="from precision_engine.cli.app import main; main()"
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 420 python3 -c "$CLI" bench linear --quick \
  --variants bf16,fp8_cublas,fp8_bi,torchao --out "$OUT/bench_linear_torchao.json" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/linear_torchao.txt" | tail -n 16
