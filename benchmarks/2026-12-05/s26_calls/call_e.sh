#!/usr/bin/env bash
# Twenty-sixth session, call E: `bench linear` at 8192 and 16384 tokens, BF16, fp8_bi and torchao's
# Float8BlockwiseLinear in one run, DeepGEMM built, the same tree as call D (rows written as measured: a timeout
# keeps what ran).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
source scripts/device_deep_gemm.sh
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 470 python3 -c "from precision_engine.cli.app import main; main()" bench linear \
  --tokens 8192,16384 --variants bf16,fp8_bi,torchao --out "$OUT/bench_linear.json" > "$OUT/bench_linear.txt" 2>&1
echo "bench linear rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/bench_linear.txt" | tail -n 45 | cut -c1-200
