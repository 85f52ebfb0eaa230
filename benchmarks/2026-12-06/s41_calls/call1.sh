#!/usr/bin/env bash
# Forty-first session, call 1 (carry .whl and .dg): the wgrad pair's Gluon kernel (gluon_wgrad): its bits test,
# the GEMM probe against cuBLAS / BF16 / the blocks form, then bench linear fwd+bwd with AUTO's wgrad on it.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
gpu_tests pair 240 tests/numerics/gpu/test_gemm_gpu.py -k "gluon_pair or wgrad_pair"
timeout 200 python3 benchmarks/2026-12-06/s41_calls/probe_pair.py --rounds 2 > "$OUT/probe.txt" 2>&1
echo "probe rc=$?"; cat "$OUT/probe.txt" | cut -c1-250
for tokens in 8192 16384; do
  timeout ${LINEAR_S:-200} python3 -c "from precision_engine.cli.app import main; main()" bench linear \
    --tokens "$tokens" --variants bf16,fp8_bi,fp8_bi_wblocks --rounds 2 --out "$OUT/linear_$tokens.json" \
    > "$OUT/linear_$tokens.txt" 2>&1
  echo "bench linear $tokens rc=$?"
  grep -E "target met" "$OUT/linear_$tokens.txt" | cut -c1-700
done
