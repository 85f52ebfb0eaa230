#!/usr/bin/env bash
# Call 2 (eleventh session): the decode rows with and without the token-quantizing decode launch (387ecc9), in
# one process; one GRPO step of the whole 8B (BF16 masters for both policies) at micro-batches of 8 and 32
# sequences; then the linear bench on every 8B training shape with its graphed passes (no torchao).
set -u
cd "$(dirname "$0")/../../.."
for wheel in .whl/*.whl; do case $(basename "$wheel") in torchao-*) ;; *) python3 -m pip install -q --no-index --no-deps \
  --no-compile --target /tmp/site "$wheel" ;; esac; done > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import precision_engine.policy, precision_engine.cli.app" || exit 3
CLI="from precision_engine.cli.app import main; main()"
timeout 60 python3 - <<'PY' 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/decode_ab.txt" | tail -n 40
import json, os
from precision_engine.bench.linear import bench_linear, format_table
from precision_engine.numerics import linear
shapes = ((4096, 4096), (1024, 4096), (14336, 4096), (6144, 4096))
result = {}
for routed in (True, False, True):
    if not routed:
        linear.fp8_gemm_of_tokens, keep = (lambda *a, **k: None), linear.fp8_gemm_of_tokens
    rows = bench_linear(shapes=shapes, ms=(1, 16, 64), variants=("bf16", "fp8_bi"), reps=50)
    if not routed:
        linear.fp8_gemm_of_tokens = keep
    print("token-quantizing launch" if routed else "two launches (quantize, then GEMM)")
    print(format_table(rows))
    result.setdefault(str(routed), []).append(rows)
json.dump(result, open(os.environ["OUT"] + "/decode_ab.json", "w"), indent=1)
PY
for mb in 8 32; do
  timeout 150 python3 -m precision_engine.bench.rl_step --layers 0 --master-weights bf16 --micro-batch $mb \
    --out "$OUT/rl_step_mb$mb.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tail -n 6 | tee -a "$OUT/rl_step.txt"
done
timeout 200 python3 - <<'PY' 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/linear_all.txt" | tail -n 70
import json, os
from precision_engine.bench.linear import bench_linear, format_header, format_row, format_table
out = os.environ["OUT"] + "/bench_linear_all.json"
print(format_header())
def on_row(row, rows):
    print(format_row(row))
    json.dump(rows, open(out, "w"), indent=1)
rows = bench_linear(ms=(8192, 16384), variants=("bf16", "fp8_cublas", "fp8_bi"), on_row=on_row)
print(format_table(rows))
PY
