#!/usr/bin/env bash
# Thirty-second session, call W8 (carry .whl; about 3 minutes): the Gluon re-quantizer with 8-warp programs
# (128 columns, one whole input group) beside the swept ones, after call EA found its 4-warp programs fastest.
# With ../s30_calls/gluon_requant.patch applied and (8, 8), (8, 4) added to the test's and the sweep's programs:
# the re-quantizer's GPU bits test, then two rounds of `bench quant --sweep` on the re-quantizer rows.
set -u
cd "$(dirname "$0")/../../.."
git apply benchmarks/2026-12-05/s30_calls/gluon_requant.patch || { echo "gluon_requant.patch does not apply"; exit 4; }
sed -i 's/^GLUON_REQUANT_SWEEP = \[(2, 8), (4, 8), (2, 4), (4, 4)\]/GLUON_REQUANT_SWEEP = [(2, 8), (4, 8), (8, 8), (8, 4), (4, 4)]/' \
  precision_engine/bench/quant.py
sed -i 's/^@pytest.mark.parametrize("program", \[(2, 8), (4, 8), (2, 4), (4, 4)\]/@pytest.mark.parametrize("program", [(2, 8), (4, 8), (8, 8), (8, 4), (4, 4)]/' \
  tests/numerics/gpu/test_quant_gpu.py
grep -c "(8, 8), (8, 4)" precision_engine/bench/quant.py tests/numerics/gpu/test_quant_gpu.py
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_tests bits 150 tests/numerics/gpu/test_quant_gpu.py -k gluon_requantizer
ROWS="requant fp8 -,requant fp8 triton kernel,requant gluon"
for round in 1 2; do
  timeout 100 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep --reps 30 \
    --only "$ROWS" --out "$OUT/w8_$round.json" > "$OUT/w8_$round.txt" 2>&1
  echo "round $round rc=$?"
done
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
from statistics import median
rows = {}
for p in sorted(Path(sys.argv[1]).glob("w8_*.json")):
    for r in json.loads(p.read_text())["rows"]:
        rows.setdefault((r["kernel"], "x".join(map(str, r["shape"]))), []).append(r["pct_copy"])
for (kernel, shape), pct in rows.items():
    print(f"{kernel} | {shape} | {median(pct):.1f}% of copy | rounds {' '.join(f'{p:.1f}' for p in pct)}")
PY
