#!/usr/bin/env bash
# Thirty-third session, call E (carry .whl; about 90 s): call D cut to what the device time left allows: the
# 8-warp two-group program's bits, then its row beside AUTO's and a copy of the same bytes (fp32 scales).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_tests bits 60 tests/numerics/gpu/test_quant_gpu.py -k "gluon_requantizer and w8-lanes8-x2"
timeout 60 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep --reps 30 \
  --only "requant fp8 -,requant gluon w8 t8" --out "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "quant rc=$?"
python3 - "$OUT/quant.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(f"{r['kernel'][:44]:<44} {'x'.join(map(str, r['shape'])):>11} {r['pct_copy']:5.1f}%")
PY
