#!/usr/bin/env bash
# Forty-seventh session, call 1 (carry .whl and .dg): on an H200, decode in rounds and torchao in turns
# (`s42_calls/call6.sh` with SWAP=0 TORCHAO=1); on an H100, the GPU tests of what the forty-sixth session's
# chain_config change (one wgmma in flight on 8-row weight tiles) runs through: the chain GEMM and the linear, the
# compiled and graph-captured paths, the decode engine and the decoder's KV path.
set -u
cd "$(dirname "$0")/../../.."
card=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$card" in
  *H200*) SWAP=0 TORCHAO=1 bash benchmarks/2026-12-06/s42_calls/call6.sh; exit 0 ;;
esac
echo "$card"
source scripts/device_env.sh
gpu_tests gemm_linear ${GEMM_S:-300} tests/numerics/gpu/test_gemm_gpu.py tests/numerics/gpu/test_linear_gpu.py
gpu_tests compile_graph ${COMPILE_S:-110} tests/numerics/gpu/test_compile_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py
gpu_tests engine ${ENGINE_S:-110} tests/rl/gpu tests/models/gpu
