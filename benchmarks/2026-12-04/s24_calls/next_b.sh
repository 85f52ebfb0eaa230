#!/usr/bin/env bash
# Prepared in the twenty-fourth session, for the next one, on the tree next_a.sh runs on (all four patches
# applied). The Gluon re-quantizer's bytes (GPU tests) and bench.quant's re-quantizer rows (AUTO: the Gluon kernel,
# against a copy in the same run; the Triton kernel's configs are in requant_sweep.py's run and s23's records); then the one-launch decode's bits against
# Q(x) and the chain GEMM, and fused_probe.py (the whole linear: two launches, Q(x) given, one launch); between
# them requant_sweep.py (the Gluon re-quantizer's ring depth and programs an SM). About 6-8 minutes.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -p no:cacheprovider"
timeout 150 $T -m gpu tests/numerics/gpu/test_quant_gpu.py -k "requant" > "$OUT/tests_requant.log" 2>&1
echo "requant tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_requant.log" | tail -n 8 | cut -c1-300
timeout 120 python3 -m precision_engine.bench.quant --only "requant" --json "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "bench quant rc=$?"; tail -n 40 "$OUT/quant.txt" | cut -c1-200
timeout 120 python3 benchmarks/2026-12-04/s24_calls/requant_sweep.py "$OUT/requant_sweep.json" > "$OUT/requant_sweep.log" 2>&1
echo "requant sweep rc=$?"; grep -E "bytes|copy|x[0-9]+:|done|Error" "$OUT/requant_sweep.log" | cut -c1-250
timeout 140 python3 benchmarks/2026-12-04/s23_calls/fused_probe.py "$OUT/fused.json" > "$OUT/fused.log" 2>&1
echo "probe rc=$?"; grep -E "M=|Error" "$OUT/fused.log" | cut -c1-250
