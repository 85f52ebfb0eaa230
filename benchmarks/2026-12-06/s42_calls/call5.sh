#!/usr/bin/env bash
# Forty-second session, call 5 (carry .whl): the GPU tests that decode through the chain launch after ff5f11a
# (narrow weight tiles wherever 64-row tiles would fill a quarter of the SMs: every small test model's weights):
# rollout logprobs against the trainer's bitwise, the linear, graph capture, and the GEMM file.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
gpu_tests rl 200 tests/rl/gpu
gpu_tests linear 200 tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py
gpu_tests gemm 420 tests/numerics/gpu/test_gemm_gpu.py
