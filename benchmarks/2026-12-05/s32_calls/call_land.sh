#!/usr/bin/env bash
# Thirty-second session, call LAND (carry .whl; about 3 minutes): main as it lands, with the Gluon re-quantizer
# in AUTO at 8-warp programs: its compile checks, the quantizers' GPU bits tests that take the re-quantizer
# (AUTO's dispatch included), then `precision bench quant` (the shipped rows) and the re-quantizer's sweep rows.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/numerics/test_gluon_compile.py -k requant \
  > "$OUT/compile.log" 2>&1
echo "compile rc=$?"; tail -n 1 "$OUT/compile.log" | cut -c1-200
gpu_tests bits 200 tests/numerics/gpu/test_quant_gpu.py -k "requant or gluon or fused_grad_output"
cli() { timeout 150 python3 -c "from precision_engine.cli.app import main; main()" "$@"; }
cli bench quant --reps 30 --out "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "bench quant rc=$?"
cli bench quant --sweep --reps 30 --only "requant fp8 -,requant fp8 triton kernel,requant gluon" \
  --out "$OUT/sweep.json" > "$OUT/sweep.txt" 2>&1
echo "sweep rc=$?"
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
for name in ("quant", "sweep"):
    for r in json.loads((Path(sys.argv[1]) / f"{name}.json").read_text())["rows"]:
        print(f"{name} | {r['kernel']} | {'x'.join(map(str, r['shape']))} | {r['pct_copy']:.1f}% of copy")
PY
