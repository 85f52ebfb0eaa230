#!/usr/bin/env bash
# Prepared for the next device session (carry .whl and .dg; about 6 minutes on a Hopper GPU): cuda_context.patch.
#   1. its GPU test on main first, which should fail (a Gluon launch and DeepGEMM as a new thread's first CUDA work,
#      and a fresh process's first backward starting with a Gluon launch): the tests can fail;
#   2. the patch applied: that test again, then the GPU tests of every launch it touches (the Gluon grad-output
#      quantizer, DeepGEMM, the Triton and Gluon GEMMs' TMA paths, the linear);
#   3. host_pieces.py on the patched tree: the driver check should add about a microsecond a launch; then
#      host_glue.py: the step's host time outside the calls numerics.linear makes.
set -u
cd "$(dirname "$0")/../../../.."
here=benchmarks/2026-12-06/s39_calls
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
cp $here/next/test_cuda_context_gpu.py.txt tests/numerics/gpu/test_cuda_context_gpu.py
gpu_tests context_main 120 tests/numerics/gpu/test_cuda_context_gpu.py
rm tests/numerics/gpu/test_cuda_context_gpu.py
git apply $here/next/cuda_context.patch || patch -p1 < $here/next/cuda_context.patch || exit 4
gpu_tests context_patch 120 tests/numerics/gpu/test_cuda_context_gpu.py
gpu_tests launches 300 tests/numerics/gpu/test_quant_gpu.py tests/numerics/gpu/test_deep_gemm_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_gemm_gpu.py -k "gluon or deep or launch_choices or linear"
timeout 90 python3 $here/host_pieces.py > "$OUT/host_pieces.txt" 2>&1; echo "host rc=$?"; grep "host us" "$OUT/host_pieces.txt"
timeout 60 python3 $here/next/host_glue.py > "$OUT/host_glue.txt" 2>&1; echo "glue rc=$?"; grep "trial" "$OUT/host_glue.txt" | cut -c1-400
