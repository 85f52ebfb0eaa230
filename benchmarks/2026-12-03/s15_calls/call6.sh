#!/usr/bin/env bash
# Call 6 (fifteenth session): AUTO's Triton with one K segment for weights of >= 14336 rows, its prefill on
# pinned cuBLAS (same bits): GPU tests (rows bitwise for AUTO, the engine's on-policy tests), one GRPO step of
# the whole 8B (rollout and trainer logprobs bitwise), the linear at 8192 tokens and decode sizes.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
CLI="from precision_engine.cli.app import main; main()"
python3 -c "import time; t=time.time(); from precision_engine.numerics import cublas_pinned as c; c.extension(); print(f'extension {time.time()-t:.1f} s')"
timeout 200 python3 -m pytest -q -rf -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py > "$OUT/test_numerics.log" 2>&1 &
timeout 200 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
grep -E "passed|failed|FAILED|Error" "$OUT/test_numerics.log" | tail -n 12 | cut -c1-300
grep -E "passed|failed|FAILED|Error" "$OUT/test_engine.log" | tail -n 6 | cut -c1-300
timeout 200 python3 -m precision_engine.bench.rl_step --layers 0 --master-weights bf16 --micro-batch 32 \
  --out "$OUT/rl_step.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tail -n 4 | tee "$OUT/rl_step.txt"
timeout 100 python3 -c "$CLI" bench linear --quick --tokens 8192,1,64 --variants bf16,fp8_bi,fp8_bi_pinned \
  --out "$OUT/bench_linear.json" 2>&1 | grep -v "^\[W\|Warning\|warn(\|return Variable" > "$OUT/linear.txt"
echo "bench rc=$?"; cut -c1-130 "$OUT/linear.txt" | tail -n 12
