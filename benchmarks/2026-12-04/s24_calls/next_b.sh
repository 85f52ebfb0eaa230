#!/usr/bin/env bash
# Prepared in the twenty-fourth session, for the next one, on the tree next_a.sh runs on (all four patches
# applied). The Gluon re-quantizer's bytes (GPU tests) and bench.quant's re-quantizer rows (AUTO: the Gluon kernel;
# the swept configs: the Triton kernel; against a copy in the same run); then the one-launch decode's bits against
# Q(x) and the chain GEMM, and fused_probe.py (the whole linear: two launches, Q(x) given, one launch).
# About 5-7 minutes.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -p no:cacheprovider"
timeout 200 $T -m gpu tests/numerics/gpu/test_quant_gpu.py -k "requant" > "$OUT/tests_requant.log" 2>&1
echo "requant tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_requant.log" | tail -n 8 | cut -c1-300
timeout 200 python3 -m precision_engine.bench.quant --sweep --only "requant" --json "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "bench quant rc=$?"; tail -n 40 "$OUT/quant.txt" | cut -c1-200
timeout 150 python3 benchmarks/2026-12-04/s23_calls/fused_probe.py "$OUT/fused.json" > "$OUT/fused.log" 2>&1
echo "probe rc=$?"; grep -E "M=|Error" "$OUT/fused.log" | cut -c1-250
