#!/usr/bin/env bash
# Thirty-third session, call A (carry .whl; about 4 minutes), best on an H200, issue 12's card: the re-quantizer's
# GPU bits tests (the Gluon kernel's, AUTO's dispatch), then `precision bench quant` on the target rows (the
# re-quantizer's and the 1x128 activation quantizer's), each beside a device copy of its own bytes on each shape,
# with the Triton re-quantizer and the Gluon kernel's 8- and 4-warp programs, fp32 and power-of-two scales.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_tests bits 150 tests/numerics/gpu/test_quant_gpu.py -k "requant"
timeout 200 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep --reps 30 \
  --only "requant fp8 -,requant fp8 triton kernel,requant gluon w8,requant gluon w4,requant pow2 -,requant pow2 triton kernel,1x128 act (triton)" \
  --out "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
echo "quant rc=$?"
python3 - "$OUT/quant.json" <<'PY'
import json, sys
from precision_engine.bench import quant
rows = json.load(open(sys.argv[1]))["rows"]
for r in rows:
    print(f"{r['kernel'][:44]:<44} {'x'.join(map(str, r['shape'])):>11} {r['pct_copy']:5.1f}%")
print(*quant.summary(rows), sep="\n")
PY
