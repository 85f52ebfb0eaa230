#!/usr/bin/env bash
# Call 1 (nineteenth session): torch.compile of FP8 linear steps on the GPU (breaks and bits), without DeepGEMM
# (breaks only) and with it; then ours beside torchao at 8192 and 16384 tokens with DeepGEMM (`bench linear --quick`).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
BASE=$PYTHONPATH
source benchmarks/2026-12-04/s19_calls/dg_setup.sh
PYTHONPATH=$BASE timeout 100 python3 benchmarks/2026-12-04/s19_calls/compile_probe.py --explain-only \
  > "$OUT/compile_no_dg.txt" 2>&1
grep -v "^\[W\|Warning\|warn(" "$OUT/compile_no_dg.txt" | tail -n 30 | cut -c1-220
timeout 200 python3 benchmarks/2026-12-04/s19_calls/compile_probe.py > "$OUT/compile_dg.txt" 2>&1
grep -v "^\[W\|Warning\|warn(" "$OUT/compile_dg.txt" | grep -v "^  File\|^    " | tail -n 40 | cut -c1-220
export PYTHONPATH=/tmp/ao:$PYTHONPATH
timeout 270 python3 -c "from precision_engine.cli.app import main; main()" bench linear --quick --tokens 8192,16384 \
  --variants bf16,fp8_cublas,fp8_bi,torchao --out "$OUT/linear_quick.json" > "$OUT/linear_quick.txt" 2>&1
grep -v "^\[W\|Warning\|warn(\|run_backward" "$OUT/linear_quick.txt" | tail -n 14 | cut -c1-250
