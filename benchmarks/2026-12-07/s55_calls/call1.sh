#!/usr/bin/env bash
# Fifty-fifth session, call 1 (carry .whl): on an H200 `s54_calls/call4.sh` (about 5 minutes; its linear, graphs
# and torch.compile GPU tests run this session's changes too). On any other card, this session's changes on a GPU:
# the FP8 linear's Q(W) cache keyed on the weight object (WeightVersion), its bias gradient in the bias's dtype,
# fp8_gemm's operand checks (dtype, scales, devices, out_dtype): the linear's, graphs', torch.compile's and the
# GEMM's GPU tests, then the rollout engine's (its decode graph reads the cached Q(W)). END_S: 300 s.
set -u
cd "$(dirname "$0")/../../.."
END_S=${END_S:-300}
source scripts/device_card.sh
case "$card" in *H200*) exec bash benchmarks/2026-12-07/s54_calls/call4.sh ;; esac
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
gpu_tests linear 150 tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py \
  tests/numerics/gpu/test_compile_gpu.py
seconds_left $((END_S - 90)) && gpu_tests gemm $left tests/numerics/gpu/test_gemm_gpu.py
seconds_left $END_S && gpu_tests engine $left tests/rl/gpu/test_engine_gpu.py
