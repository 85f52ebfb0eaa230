#!/usr/bin/env bash
# Prepared in the twenty-fourth session, for the next one, on the tree next_a.sh runs on, with
# gluon_grad_output.patch applied too (after the fifth, one_launch_linear.patch, or after the fourth: it applies
# either way). The TMA-fed quantizers' bytes (GPU tests: the re-quantizer, the grad output's two operands) and
# bench.quant's rows for them (AUTO: the Gluon kernels, against a copy in the same run); gluon_quant_sweep.py
# (their ring depth and programs an SM, against the Triton kernels); then fused_probe.py (the whole linear's
# decode: two launches, Q(x) given, one launch). Timeouts 540 s in all; about 6-7 minutes.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -p no:cacheprovider"
timeout 150 $T -m gpu tests/numerics/gpu/test_quant_gpu.py -k "gluon" > "$OUT/tests_quant.log" 2>&1
echo "quantizer tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_quant.log" | tail -n 8 | cut -c1-300
timeout 90 python3 -m precision_engine.bench.quant --only "requant fp8,requant pow2,dy 1x128" \
  --json "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "bench quant rc=$?"; tail -n 30 "$OUT/quant.txt" | cut -c1-200
timeout 170 python3 benchmarks/2026-12-04/s24_calls/gluon_quant_sweep.py "$OUT/sweep.json" > "$OUT/sweep.log" 2>&1
echo "sweep rc=$?"; grep -E "bytes|copy|x[0-9]+:|done|Error|not in" "$OUT/sweep.log" | cut -c1-250
timeout 130 python3 benchmarks/2026-12-04/s23_calls/fused_probe.py "$OUT/fused.json" > "$OUT/fused.log" 2>&1
echo "probe rc=$?"; grep -E "M=|Error" "$OUT/fused.log" | cut -c1-250
