#!/usr/bin/env bash
# Fortieth session (carry .whl and .dg; about 2 minutes): the CUDA-context GPU test with DeepGEMM named (AUTO's
# fallback hid its failure on main in call 1), on main with the fix, then with the fix's DeepGEMM line taken out
# (should fail there).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
gpu_tests context_fixed 120 tests/numerics/gpu/test_cuda_context_gpu.py
sed -i '/make_context_current(a.data.device)  # DeepGEMM/d' precision_engine/numerics/gemm.py
gpu_tests context_deep_gemm_unfixed 120 tests/numerics/gpu/test_cuda_context_gpu.py -k deep_gemm
