#!/usr/bin/env bash
# Forty-seventh session, call 2 (carry .whl and .dg): on an H200, decode in rounds and torchao in turns
# (`s42_calls/call6.sh` with SWAP=0 TORCHAO=1); on an H100, the rest of `pytest -m gpu tests` (call 1 ran the
# chain GEMM, linear, compile, graph-capture, engine and decoder-KV files), DeepGEMM built for its tests.
set -u
cd "$(dirname "$0")/../../.."
card=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$card" in
  *H200*) SWAP=0 TORCHAO=1 bash benchmarks/2026-12-06/s42_calls/call6.sh; exit 0 ;;
esac
echo "$card"
source scripts/device_env.sh
source scripts/device_deep_gemm.sh
gpu_tests rest ${REST_S:-500} tests --ignore=tests/numerics/gpu/test_gemm_gpu.py \
  --ignore=tests/numerics/gpu/test_linear_gpu.py --ignore=tests/numerics/gpu/test_compile_gpu.py \
  --ignore=tests/numerics/gpu/test_graph_capture_gpu.py --ignore=tests/rl/gpu --ignore=tests/models/gpu
