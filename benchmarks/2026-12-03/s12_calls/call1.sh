#!/usr/bin/env bash
# Call 1 (twelfth session): the grad-output quantizer as one launch of interleaved 1x128 and tokens-transposed
# programs (GPU bitwise tests, a config sweep beside the two kernels), the re-quantizer's Markstein division
# checked for bytes again, and a per-kernel profile of one 14336x4096 training step beside torchao.
set -u
cd "$(dirname "$0")/../../.."
HERE=benchmarks/2026-12-03/s12_calls
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in
    torchao-*) python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ao "$wheel" ;;
    *) python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;;
  esac
done > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import precision_engine.policy, precision_engine.cli.app" || exit 3
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_quant_gpu.py \
  tests/numerics/gpu/test_linear_gpu.py tests/numerics/test_fused_linear.py > "$OUT/test_quant.log" 2>&1
tail -n 5 "$OUT/test_quant.log"
timeout 120 python3 $HERE/requant_markstein.py 2>&1 | tee "$OUT/requant_markstein.txt"
timeout 150 python3 -m precision_engine.bench.quant --sweep --only "dy ,dy fused,requant fp8,requant pow2 ->" \
  --reps 30 --json "$OUT/bench_quant.json" > "$OUT/bench_quant.txt" 2>&1
grep -v "^\[W\|Warn" "$OUT/bench_quant.txt" | head -60
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 200 python3 $HERE/profile_step.py 14336 4096 8192 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/profile_14336.txt"
