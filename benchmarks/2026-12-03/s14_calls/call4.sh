#!/usr/bin/env bash
# Call 4 (fourteenth session): the final state, where AUTO's batch-invariant forward is Triton again and the
# pinned cuBLAS kernel runs by name: GPU tests (gemm, linear, graph capture, compile, on-policy engine), then
# `bench kernels --quick` (its cublas_pinned column) and the whole linear, pinned against Triton, in one process.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
CLI="from precision_engine.cli.app import main; main()"
python3 -c "import time; t=time.time(); from precision_engine.numerics import cublas_pinned as c; c.extension(); print(f'extension {time.time()-t:.1f} s')"
timeout 240 python3 -m pytest -q -rf -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py \
  tests/numerics/test_fused_linear.py tests/numerics/test_linear.py > "$OUT/test_numerics.log" 2>&1 &
timeout 240 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
grep -E "passed|failed|FAILED|Error" "$OUT/test_numerics.log" | tail -n 12 | cut -c1-300
grep -E "passed|failed|FAILED|Error" "$OUT/test_engine.log" | tail -n 6 | cut -c1-300
timeout 150 python3 -c "$CLI" bench kernels --quick --out "$OUT/bench_kernels.json" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/kernels.txt" | tail -n 8 | cut -c1-220
timeout 150 python3 - <<'PY' 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/linear_pinned_vs_triton.txt"
import json, os
from precision_engine.bench import linear as L
from precision_engine.numerics.formats import Kernel, LinearSpec
from precision_engine.policy.model import NumericsSpec
specs = L._specs
def with_pinned():  # the fp8_cublas column runs the pinned kernel, batch-invariant, for this record only
    table = specs()
    spec, _ = table["fp8_cublas"]
    table["fp8_cublas"] = (LinearSpec(**{**spec.__dict__, "kernel": Kernel.CUBLAS_PINNED}), NumericsSpec(batch_invariant=True))
    return table
L._specs = with_pinned
rows = L.bench_linear(quick=True, ms=(8192, 1, 16, 64), variants=("bf16", "fp8_cublas", "fp8_bi"))
print("N x K, M, pass: pinned x, triton x (BF16 ms)")
for r in rows:
    print(f"{r['n']}x{r['k']} {r['m']:5d} {r['pass']:14s} {r.get('fp8_cublas_x', float('nan')):.2f} {r['fp8_bi_x']:.2f} ({r['bf16_ms']:.4f})")
json.dump(rows, open(os.environ["OUT"] + "/linear_pinned_vs_triton.json", "w"), indent=1)
PY
