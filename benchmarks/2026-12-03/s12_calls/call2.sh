#!/usr/bin/env bash
# Call 2 (twelfth session), after call 1's findings: the fixes checked (the grad-output launch's last partial
# region, the quotient's -0 under Triton 3.6, PDL released by the token quantizer only), the re-quantizer on its
# Markstein division, the decode rows with PDL on and off again, and one GRPO step of the whole 8B at 32
# sequences per micro-batch (out of memory before the chunked logprob).
set -u
cd "$(dirname "$0")/../../.."
HERE=benchmarks/2026-12-03/s12_calls
source scripts/device_env.sh
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_quant_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_gemm_gpu.py tests/numerics/test_fused_linear.py \
  tests/numerics/gpu/test_graph_capture_gpu.py > "$OUT/test_numerics.log" 2>&1 &
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/numerics/test_triton_quant.py -k negates \
  tests/numerics/test_pdl.py tests/numerics/test_gluon_compile.py > "$OUT/test_offline.log" 2>&1 &
wait
grep -h "passed\|failed\|FAILED\|Error" "$OUT/test_numerics.log" "$OUT/test_engine.log" "$OUT/test_offline.log" | tail -n 12
timeout 60 python3 $HERE/requant_markstein.py 2>&1 | tee "$OUT/requant_markstein.txt" | grep -v "^   "
timeout 60 python3 -m precision_engine.bench.quant --only "dy 1x128,requant fp8,requant pow2 ->" --reps 30 \
  --json "$OUT/bench_quant.json" 2>&1 | grep -v "^\[W\|Warn" | tee "$OUT/bench_quant.txt"
timeout 80 python3 - <<'PY' 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/decode_pdl.txt" | grep -v "^first"
import json, os
from precision_engine.bench.linear import bench_linear
from precision_engine.numerics import pdl
shapes = ((4096, 4096), (1024, 4096), (14336, 4096), (6144, 4096), (28672, 4096), (4096, 14336))
result, ratios = {}, {}
for run, enabled in enumerate((True, False, True, False)):
    pdl.ENABLED = enabled
    rows = bench_linear(shapes=shapes, ms=(1, 16, 64), variants=("bf16", "fp8_bi"), reps=30)
    result[f"run{run}_pdl_{'on' if enabled else 'off'}"] = rows
    for r in rows:
        ratios.setdefault((r["n"], r["k"], r["m"]), []).append(r["fp8_bi_x"])
print("N x K, M: x BF16 with PDL on, off, on, off")
for (n, k, m), xs in ratios.items():
    print(f"{n}x{k} {m:3d}: " + "  ".join(f"{x:.2f}" for x in xs))
json.dump(result, open(os.environ["OUT"] + "/decode_pdl.json", "w"), indent=1)
PY
timeout 170 python3 -m precision_engine.bench.rl_step --layers 0 --master-weights bf16 --micro-batch 32 \
  --out "$OUT/rl_step_mb32.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tail -n 6 | tee "$OUT/rl_step.txt"
