#!/usr/bin/env bash
# Prepared for the next session (not run: the twenty-third ended with no device time left). First, on the CPU:
#   git apply benchmarks/2026-12-04/s23_calls/gluon_reciprocal.patch benchmarks/2026-12-04/s23_calls/gluon_requant.patch
#   (its compile test: test_gluon_compile.py passes 16 on Triton 3.6 with ptxas). Then run this as a device call: the Gluon re-quantizer's bytes against the Triton
#   kernel's and the reference (GPU tests), then bench.quant's re-quantizer rows, where "requant fp8 -> tokens^T"
#   and "requant pow2" are AUTO (the Gluon kernel with the patch) and the swept configs the Triton kernel, against a
#   copy in the same run.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -p no:cacheprovider"
timeout 200 $T -m gpu tests/numerics/gpu/test_quant_gpu.py -k "requant" > "$OUT/tests_requant.log" 2>&1
echo "requant tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_requant.log" | tail -n 8 | cut -c1-300
timeout 60 $T tests/numerics/test_gluon_compile.py > "$OUT/tests_compile.log" 2>&1
echo "compile tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_compile.log" | tail -n 4 | cut -c1-300
timeout 200 python3 -m precision_engine.bench.quant --sweep --only "requant" --json "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "bench quant rc=$?"; tail -n 40 "$OUT/quant.txt" | cut -c1-200
