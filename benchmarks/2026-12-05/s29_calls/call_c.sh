#!/usr/bin/env bash
# Twenty-ninth session, call C (carry .whl): with the wide weights on the chain launch at up to 32 tokens, the
# linear's rows across M and the engine's on-policy bits (rollout logprobs == trainer's).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_tests invariant 220 tests/numerics/gpu/test_triton_invariant_gpu.py
gpu_tests engine 240 tests/rl/gpu/test_engine_gpu.py
