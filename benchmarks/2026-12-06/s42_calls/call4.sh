#!/usr/bin/env bash
# Forty-second session, call 4 (carry .whl): the one-launch decode (each program quantizing the tokens into shared memory): bits, then its A/B against the two
# launches, BF16 beside them, on the narrow 8B weights.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
gpu_tests fused 240 tests/numerics/gpu/test_gemm_gpu.py -k quantizes_its_own_tokens
timeout ${AB_S:-280} python3 benchmarks/2026-12-06/s42_calls/fused_decode_ab.py \
  --shapes ${SHAPES:-4096x4096,6144x4096} --tokens ${TOKENS:-1,4,8} \
  --rounds 3 2>&1 | tee "$OUT/ab.txt" | grep -v Warning
echo "ab rc=${PIPESTATUS[0]}"
