#!/usr/bin/env bash
# Prepared in the thirty-third session for the next one (carry .whl and .dg; timeouts add up to 560 s, about 8
# minutes expected), best on an H200, issue 12's card:
#   1. the Gluon re-quantizer's GPU bits test over every program the sweep times, the two-group ones (TILES = 2,
#      not yet run on a GPU) among them;
#   2. `bench quant --sweep` on the re-quantizer's rows: AUTO, the Triton kernel, a copy of the same bytes, every
#      8-, 4- and 2-warp Gluon program with one and two token groups, fp32 and power-of-two scales (the target
#      line last: on the H200 the re-quantizer has not been measured since the Gluon kernel landed);
#   3. `bench linear` on the rows torchao did not reach in the thirty-third session's call B (6144x4096 and
#      28672x4096), BF16 now timed again beside torchao.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_tests bits 150 tests/numerics/gpu/test_quant_gpu.py -k "gluon_requantizer"
timeout 150 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep --reps 30 \
  --only "requant fp8 -,requant fp8 triton kernel,requant gluon w8 t8,requant gluon w4 t8,requant gluon w2 t8,requant pow2 -,requant pow2 gluon w8 t8,requant pow2 gluon w4 t8,requant pow2 gluon w2 t8" \
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
source scripts/device_deep_gemm.sh
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 260 python3 -c "from precision_engine.cli.app import main; main()" bench linear \
  --shapes 6144x4096,28672x4096 --tokens 8192,16384 --variants bf16,fp8_bi,torchao --out "$OUT/bench_linear.json" \
  > "$OUT/bench_linear.txt" 2>&1
echo "bench linear rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/bench_linear.txt" | tail -n 8 | cut -c1-200
