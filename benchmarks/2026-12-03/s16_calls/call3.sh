#!/usr/bin/env bash
# Call 3 (sixteenth session): one K segment for every weight, narrow weights decoding on the Gluon chain launch,
# prefill and training forward on pinned cuBLAS: the Gluon compile tests, the GPU tests (GEMM, split sums,
# linear, graph capture; the engine's on-policy tests), and the linear on every 8B shape at decode sizes and
# 8192 tokens.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
CLI="from precision_engine.cli.app import main; main()"
python3 -c "import time; t=time.time(); from precision_engine.numerics import cublas_pinned as c; c.extension(); print(f'extension {time.time()-t:.1f} s')"
python3 -m pytest -q -p no:cacheprovider tests/numerics/test_gluon_compile.py 2>&1 | tail -n 2
timeout 240 python3 -m pytest -q -rf -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py \
  tests/numerics/gpu/test_split_sums_gpu.py tests/numerics/gpu/test_linear_gpu.py \
  tests/numerics/gpu/test_graph_capture_gpu.py > "$OUT/test_numerics.log" 2>&1 &
timeout 240 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
grep -E "passed|failed|FAILED|Error" "$OUT/test_numerics.log" | tail -n 12 | cut -c1-400
grep -E "passed|failed|FAILED|Error" "$OUT/test_engine.log" | tail -n 6 | cut -c1-300
timeout 250 python3 -c "$CLI" bench linear --tokens 1,16,64,8192 --variants bf16,fp8_bi \
  --out "$OUT/bench_linear.json" 2>&1 | grep -v "^\[W\|Warning\|warn(\|return Variable" > "$OUT/linear.txt"
echo "bench rc=$?"; cut -c1-110 "$OUT/linear.txt" | grep -v "^ *$" | tail -n 45
