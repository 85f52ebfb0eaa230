#!/usr/bin/env bash
# Call 1 (twelfth session), everything that needs checking once in one call (device starts were refused for an
# hour): the GPU tests of the grad-output quantizer's one launch, of programmatic dependent launch along the
# decode chain and of the chunked trainer logprob (bitwise, with the on-policy engine tests); the re-quantizer's
# Markstein division checked for bytes again; the quantizer sweep; decode with PDL on and off; the chunked
# logprob's memory; the block.
set -u
cd "$(dirname "$0")/../../.."
HERE=benchmarks/2026-12-03/s12_calls
source scripts/device_env.sh
CLI="from precision_engine.cli.app import main; main()"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_quant_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/test_fused_linear.py tests/numerics/gpu/test_gemm_gpu.py \
  tests/numerics/gpu/test_graph_capture_gpu.py > "$OUT/test_numerics.log" 2>&1 &
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
tail -n 4 "$OUT/test_numerics.log" "$OUT/test_engine.log"
timeout 60 python3 $HERE/requant_markstein.py 2>&1 | tee "$OUT/requant_markstein.txt"
timeout 100 python3 -m precision_engine.bench.quant --sweep --only "dy ,dy fused,requant fp8,requant pow2 ->" \
  --reps 30 --json "$OUT/bench_quant.json" > "$OUT/bench_quant.txt" 2>&1
grep -v "^\[W\|Warn" "$OUT/bench_quant.txt" | head -40
timeout 100 python3 - <<'PY' 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/decode_pdl.txt" | tail -n 44
import json, os
from precision_engine.bench.linear import bench_linear, format_table
from precision_engine.numerics import pdl
shapes = ((4096, 4096), (1024, 4096), (14336, 4096), (6144, 4096), (28672, 4096), (4096, 14336))
result = {}
for run, enabled in enumerate((True, False, True, False)):
    pdl.ENABLED = enabled
    rows = bench_linear(shapes=shapes, ms=(1, 16, 64), variants=("bf16", "fp8_bi"), reps=30)
    print(f"PDL {'on' if enabled else 'off'} (run {run})")
    print(format_table(rows))
    result[f"run{run}_pdl_{'on' if enabled else 'off'}"] = rows
json.dump(result, open(os.environ["OUT"] + "/decode_pdl.json", "w"), indent=1)
PY
timeout 60 python3 $HERE/logprob_memory.py 2>&1 | tee "$OUT/logprob_memory.txt"
timeout 100 python3 -c "$CLI" bench block --reps 10 --policy bf16_baseline --policy jetrl_unified \
  --out "$OUT/bench_block.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/block.txt" | tail -n 12
