#!/usr/bin/env bash
# Thirtieth session, call A (carry .whl; about 7 minutes): the Gluon re-quantizer of gluon_requant.patch, built
# and counted offline (no machine was lent that session) and never run. Its compile checks, its bytes against the
# reference and the Triton kernel (every program shape), the grad-output quantizer's bytes (the patch moves its
# `_fp8_words`), then two rounds of the re-quantizer rows of `precision bench quant --sweep`: AUTO (the Gluon
# kernel where it runs), the Triton kernel, and each Gluon program shape, against a copy measured in the same run.
set -u
cd "$(dirname "$0")/../../.."
git apply benchmarks/2026-12-05/s30_calls/gluon_requant.patch || { echo "the patch does not apply"; exit 4; }
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/numerics/test_gluon_compile.py -k "requant or grad_output" \
  > "$OUT/compile.log" 2>&1
echo "compile rc=$?"; tail -n 2 "$OUT/compile.log" | cut -c1-300
gpu_tests bits 360 tests/numerics/gpu/test_quant_gpu.py -k "gluon_requantizer or fused_requantize or gluon_grad_output"
ROWS="requant fp8 -,requant fp8 t,requant pow2 -,requant pow2 t,requant gluon"
for round in 1 2; do
  timeout 150 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep --reps 30 \
    --only "$ROWS" --out "$OUT/quant_$round.json" > "$OUT/quant_$round.txt" 2>&1
  echo "bench round $round rc=$?"
done
grep -h "requant\|copy" "$OUT"/quant_1.txt "$OUT"/quant_2.txt | cut -c1-100
