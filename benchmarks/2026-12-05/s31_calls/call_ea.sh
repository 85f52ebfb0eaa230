#!/usr/bin/env bash
# Thirty-first session, call EA (carry .whl; about 11 minutes): the one-correction quotient measured, with the
# thirtieth session's call A in the same run.
# With ../s30_calls/gluon_requant.patch applied (the Gluon re-quantizer, never run on a GPU):
# 1. its compile checks (Triton 3.6 on the device);
# 2. main's one-correction quotient beside every FP8 boundary at full size (`test_triton_quant.py`);
# 3. every quantizer's GPU bits test, the Gluon re-quantizer's and the grad output's included;
# 4. two alternating rounds (ROUNDS=1 for one, when device time is short) of `precision bench quant --sweep`
#    on the quantizer rows and every Gluon program shape. One side is this tree; the other is a copy with
#    two_corrections.patch (Markstein's two FMA corrections back). Each runs in its own process, and every row
#    is timed against a copy in the same run.
# compare.py prints each row's % of copy under both and their time ratio.
set -u
cd "$(dirname "$0")/../../.."
git apply benchmarks/2026-12-05/s30_calls/gluon_requant.patch || { echo "gluon_requant.patch does not apply"; exit 4; }
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 180 python3 -m pytest -q -p no:cacheprovider tests/numerics/test_gluon_compile.py -k "requant or grad_output" \
  > "$OUT/compile.log" 2>&1
echo "compile rc=$?"; tail -n 2 "$OUT/compile.log" | cut -c1-300
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/numerics/test_triton_quant.py -k "beside_every or matches_reference" \
  > "$OUT/boundary.log" 2>&1
echo "boundary rc=$?"; tail -n 2 "$OUT/boundary.log" | cut -c1-300
gpu_tests bits 420 tests/numerics/gpu/test_quant_gpu.py tests/numerics/gpu/test_fused_add_norm_gpu.py
rm -rf /tmp/before && mkdir -p /tmp/before && cp -r precision_engine /tmp/before/
(cd /tmp/before && git apply "$OLDPWD/benchmarks/2026-12-05/s31_calls/two_corrections.patch") \
  || { echo "two_corrections.patch does not apply"; exit 4; }
ROWS="1x128 act (triton),128x1 tokens^T,requant fp8 -,requant fp8 t,requant gluon,dy 1x128+tokens^T fused"
ROWS="$ROWS,rmsnorm+1x128 fused,silu*up+1x128 fused,128x128 weight + ^T"
bench() {  # bench TREE NAME: `precision bench quant` from TREE (its package shadows any other on the path)
  (cd "$1" && timeout 200 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
    --reps 30 --only "$ROWS" --out "$OUT/$2.json" > "$OUT/$2.txt" 2>&1)
  echo "$2 rc=$?"
}
for round in $(seq "${ROUNDS:-2}"); do
  bench /tmp/before "two_$round"
  bench "$PWD" "one_$round"
done
python3 benchmarks/2026-12-05/s31_calls/compare.py "$OUT"
