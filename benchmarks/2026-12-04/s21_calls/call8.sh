#!/usr/bin/env bash
# Call 8 (twenty-first session): the re-quantizing and grad-output kernels with fewer values per thread (new
# TOKENS_SWEEP / DUAL_SWEEP rows) beside the shipped configs on the 8B activation shapes, after the GPU tests that
# check every swept config's bytes.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 130 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_quant_gpu.py -k "fused_grad_output_full_size or tokens_transposed_every_config or fused_requantize" > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -n 2 "$OUT/tests.log"
timeout 220 python3 -m precision_engine.bench.quant --sweep \
  --only "requant fp8 ->,requant c,dy fused m,dy 1x128+tokens^T fused" \
  --json "$OUT/quant_sweep.json" > "$OUT/quant_sweep.txt" 2>&1
echo "sweep rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/quant_sweep.txt" | cut -c1-140 | tail -n 130
