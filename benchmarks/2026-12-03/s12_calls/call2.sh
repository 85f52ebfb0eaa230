#!/usr/bin/env bash
# Call 2 (twelfth session): programmatic dependent launch along the decode chain (quantize -> GEMM -> segment
# sum): the GPU tests of every decode launch and of the CUDA-graph decode (bitwise), then the decode rows with
# PDL on and off in one process, alternating; the chunked trainer logprob's memory; the block; one GRPO step of the
# whole 8B at 32 sequences per micro-batch (out of memory before the chunked logprob).
set -u
cd "$(dirname "$0")/../../.."
for wheel in .whl/*.whl; do case $(basename "$wheel") in torchao-*) ;; *) python3 -m pip install -q --no-index --no-deps \
  --no-compile --target /tmp/site "$wheel" ;; esac; done > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import precision_engine.policy, precision_engine.cli.app" || exit 3
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py > "$OUT/test_numerics.log" 2>&1 &
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
tail -n 3 "$OUT/test_numerics.log" "$OUT/test_engine.log"
timeout 150 python3 - <<'PY' 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/decode_pdl.txt" | tail -n 60
import json, os
from precision_engine.bench.linear import bench_linear, format_table
from precision_engine.numerics import pdl
shapes = ((4096, 4096), (1024, 4096), (14336, 4096), (6144, 4096), (28672, 4096), (4096, 14336))
result = {}
for run, enabled in enumerate((True, False, True, False)):
    pdl.ENABLED = enabled
    rows = bench_linear(shapes=shapes, ms=(1, 16, 64), variants=("bf16", "fp8_bi"), reps=50)
    print(f"PDL {'on' if enabled else 'off'} (run {run})")
    print(format_table(rows))
    result[f"run{run}_pdl_{'on' if enabled else 'off'}"] = rows
json.dump(result, open(os.environ["OUT"] + "/decode_pdl.json", "w"), indent=1)
PY
timeout 60 python3 benchmarks/2026-12-03/s12_calls/logprob_memory.py 2>&1 | tee "$OUT/logprob_memory.txt"
CLI="from precision_engine.cli.app import main; main()"
timeout 120 python3 -c "$CLI" bench block --reps 10 --policy bf16_baseline --policy jetrl_unified \
  --out "$OUT/bench_block.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/block.txt" | tail -n 12
timeout 170 python3 -m precision_engine.bench.rl_step --layers 0 --master-weights bf16 --micro-batch 32 \
  --out "$OUT/rl_step_mb32.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tail -n 6 | tee "$OUT/rl_step.txt"
timeout 90 python3 benchmarks/2026-12-01/s8_sweeps/profile_step.py block 2>&1 | grep -v "^\[W\|Warning\|warn(" \
  | tee "$OUT/profile_block.txt"
