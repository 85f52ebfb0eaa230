#!/usr/bin/env bash
# Thirty-third session, call D (carry .whl; about 3 minutes): the Gluon re-quantizer with two 128-token groups a
# program (both tiles' loads out before the first is quantized: 127 registers, two 8-warp programs an SM, four
# tiles in flight where three were; 9.3 SASS an element against 9.7): its bits against the reference and the
# Triton kernel, then `bench quant --sweep` on its rows beside AUTO's one-group program and a copy of the same
# bytes, fp32 and power-of-two scales.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_tests bits 100 tests/numerics/gpu/test_quant_gpu.py -k "gluon_requantizer and x2"
timeout 100 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep --reps 30 \
  --only "requant fp8 -,requant gluon w8 t8,requant gluon w4 t8,requant gluon w2 t8,requant pow2 -,requant pow2 gluon w8 t8" \
  --out "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "quant rc=$?"
python3 - "$OUT/quant.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
for r in rows:
    print(f"{r['kernel'][:44]:<44} {'x'.join(map(str, r['shape'])):>11} {r['pct_copy']:5.1f}%")
PY
