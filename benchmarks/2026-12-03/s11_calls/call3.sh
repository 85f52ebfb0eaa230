#!/usr/bin/env bash
# Call 3 (eleventh session): the GPU tests the revert of the token-quantizing decode launch touches (GEMM,
# linear, fused linear, graph capture) and the on-policy bitwise engine tests, then the linear bench --quick
# with torchao beside ours in every pass (eager and graphed), then one RL step at 16 sequences per micro-batch.
set -u
cd "$(dirname "$0")/../../.."
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in
    torchao-*) python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ao "$wheel" ;;
    *) python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;;
  esac
done > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import precision_engine.policy, precision_engine.cli.app" || exit 3
CLI="from precision_engine.cli.app import main; main()"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py tests/numerics/test_fused_linear.py \
  > "$OUT/test_numerics.log" 2>&1 &
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
tail -n 3 "$OUT/test_numerics.log" "$OUT/test_engine.log"
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 290 python3 -c "$CLI" bench linear --quick \
  --variants bf16,fp8_cublas,fp8_bi,torchao --out "$OUT/bench_linear_torchao.json" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/linear_torchao.txt" | tail -n 14
timeout 95 python3 -m precision_engine.bench.rl_step --layers 0 --master-weights bf16 --micro-batch 16 \
  --out "$OUT/rl_step_mb16.json" 2>&1 | grep -v "^\[W\|Warning\|warn(" | tail -n 4
