#!/usr/bin/env bash
# Call 5 (fifteenth session): `cublas_pinned` with its rows under 16 (and wide weights at decode sizes) on the
# one-segment Triton/Gluon launch: GPU tests (rows bitwise against cuBLAS's, the one-segment identity, graph
# capture, linear), then the whole-linear decode rows, Triton against pinned, every 8B shape (graph replays).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
CLI="from precision_engine.cli.app import main; main()"
python3 -c "import time; t=time.time(); from precision_engine.numerics import cublas_pinned as c; c.extension(); print(f'extension {time.time()-t:.1f} s')"
timeout 240 python3 -m pytest -q -rf -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py > "$OUT/test_numerics.log" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/test_numerics.log" | tail -n 14 | cut -c1-300
timeout 260 python3 -c "$CLI" bench linear --tokens 1,16,64 --variants bf16,fp8_bi,fp8_bi_pinned \
  --out "$OUT/bench_linear.json" 2>&1 | grep -v "^\[W\|Warning\|warn(\|return Variable" > "$OUT/linear.txt"
echo "bench rc=$?"; cut -c1-130 "$OUT/linear.txt" | tail -n 30
