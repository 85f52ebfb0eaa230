#!/usr/bin/env bash
# Thirty-third session, call B (carry .whl and .dg; about 8 minutes), as the twenty-sixth session's call E, on main
# with the Gluon re-quantizer and the one-correction quotient: `bench linear` at 8192 and 16384 tokens, BF16,
# fp8_bi and torchao's Float8BlockwiseLinear in one run, DeepGEMM built (rows written as measured: a timeout keeps
# what ran).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
source scripts/device_deep_gemm.sh
nvidia-smi --query-gpu=name --format=csv,noheader
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 540 python3 -c "from precision_engine.cli.app import main; main()" bench linear \
  --tokens 8192,16384 --variants bf16,fp8_bi,torchao --out "$OUT/bench_linear.json" > "$OUT/bench_linear.txt" 2>&1
echo "bench linear rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/bench_linear.txt" | tail -n 12 | cut -c1-200
