#!/usr/bin/env bash
# Forty-third session, call 2 (carry .whl and .dg; any Hopper card): the GPU tests of every Gluon launch after
# each launch makes its thread's context current once (not once per TMA descriptor), then Nsight Compute on the
# short decode rows (`call_ncu.sh`). On an H200 it goes on with the forty-second session's call 6 (
# decode in rounds).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_tests context 120 tests/numerics/gpu/test_cuda_context_gpu.py
gpu_tests gluon 100 tests/numerics/gpu/test_gemm_gpu.py tests/numerics/gpu/test_quant_gpu.py -k "chain_decode_gives and 4096-4096 or gluon_gives and 65-4096 or gluon_grad_output"
NCU_S=120 bash benchmarks/2026-12-06/s43_calls/call_ncu.sh
PROBE_S=90 DECODE_S=170 bash benchmarks/2026-12-06/s42_calls/call6.sh
