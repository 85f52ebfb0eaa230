#!/usr/bin/env bash
# Thirty-first session, call E (carry .whl; about 9 minutes, main as it is): every quantizer with fp32 scales
# divides with one FMA correction since 8051d58, where it took Markstein's two (2 instructions an element fewer,
# the same bytes: scripts/quotient_one_correction.py). First the bytes on the GPU: the quantizers' GPU tests and
# test_triton_quant.py's boundary test at full size. Then what it is worth: two alternating rounds of
# `precision bench quant` on the quantizers' rows, main and a copy with two_corrections.patch (the two
# corrections back), each in its own process, each row against a copy measured in the same run.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/numerics/test_triton_quant.py -k "beside_every or matches_reference" \
  > "$OUT/boundary.log" 2>&1
echo "boundary rc=$?"; tail -n 2 "$OUT/boundary.log" | cut -c1-300
gpu_tests bits 300 tests/numerics/gpu/test_quant_gpu.py tests/numerics/gpu/test_fused_add_norm_gpu.py
rm -rf /tmp/before && mkdir -p /tmp/before && cp -r precision_engine /tmp/before/
(cd /tmp/before && git apply "$OLDPWD/benchmarks/2026-12-05/s31_calls/two_corrections.patch") \
  || { echo "two_corrections.patch does not apply"; exit 4; }
ROWS="1x128 act (triton),128x1 tokens^T,requant fp8 -> tokens^T,dy 1x128+tokens^T fused,rmsnorm+1x128 fused"
ROWS="$ROWS,silu*up+1x128 fused,128x128 weight + ^T"
bench() {  # bench TREE NAME: `precision bench quant` from TREE (its package shadows any other on the path)
  (cd "$1" && timeout 150 python3 -c "from precision_engine.cli.app import main; main()" bench quant --reps 30 \
    --only "$ROWS" --out "$OUT/$2.json" > "$OUT/$2.txt" 2>&1)
  echo "$2 rc=$?"
}
for round in 1 2; do
  bench /tmp/before "two_$round"
  bench "$PWD" "one_$round"
done
python3 benchmarks/2026-12-05/s31_calls/compare.py "$OUT"
