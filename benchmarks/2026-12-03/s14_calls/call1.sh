#!/usr/bin/env bash
# Call 1 (fourteenth session): cuBLASLt's block-scaled FP8 GEMM with a pinned algorithm, probed for batch
# invariance and speed (cublaslt_probe.py); the word-packed weight quantizer's mend (4e77b97) on the GPU; the
# torch.compile tests' error on this image.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
which nvcc; python3 -c "from torch.utils.cpp_extension import CUDA_HOME; print('CUDA_HOME', CUDA_HOME)"
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
timeout 330 python3 benchmarks/2026-12-03/s14_calls/cublaslt_probe.py "$OUT/probe.json" > "$OUT/probe.log" 2>&1
echo "probe rc=$?"; grep -v "^\s*$" "$OUT/probe.log" | tail -n 40 | cut -c1-900
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_quant_gpu.py 2>&1 \
  | grep -E "passed|failed|FAILED|Error" | tail -n 8
timeout 120 python3 -m pytest -q -x -rf -p no:cacheprovider tests/numerics/test_linear.py \
  tests/numerics/test_fused_linear.py -k compile > "$OUT/compile.log" 2>&1
echo "compile rc=$?"; grep -E "Error|error|FAILED|passed|failed" "$OUT/compile.log" | head -n 30 | cut -c1-400
