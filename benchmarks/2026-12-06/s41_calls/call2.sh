#!/usr/bin/env bash
# Forty-first session, call 2 (carry .whl; no DeepGEMM needed): the wgrad pair kernel with column halves
# (`gluon_wgrad._split_mma_partition`): its bits test, then its launch choices against cuBLAS.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_tests pair 240 tests/numerics/gpu/test_gemm_gpu.py -k "gluon_pair"
timeout 240 python3 benchmarks/2026-12-06/s41_calls/probe_pair2.py > "$OUT/probe2.txt" 2>&1
echo "probe2 rc=$?"; cat "$OUT/probe2.txt" | cut -c1-250
