#!/usr/bin/env bash
# Fortieth session (carry .whl and .dg; about 5 minutes): `bench linear --rounds 3` with the variants taking turns
# call by call (`gemm.timed_turns`, this session), the 8B projections at 8192 and 16384 tokens, bf16, fp8_bi and
# fp8_bi_wblocks, eager and graphed, the SM clock and power sampled beside it; first the GPU tests of the benches
# whose timing changed (SKIP_TESTS=1 skips them: call 7).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
[ -n "${SKIP_TESTS:-}" ] || gpu_tests bench 120 tests/bench
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > "$OUT/smi.csv" 2>&1 &
smi=$!
for tokens in 8192 16384; do
  timeout ${LINEAR_S:-240} python3 -c "from precision_engine.cli.app import main; main()" bench linear \
    --tokens "$tokens" --variants bf16,fp8_bi,fp8_bi_wblocks --rounds 3 --out "$OUT/linear_$tokens.json" \
    > "$OUT/linear_$tokens.txt" 2>&1
  echo "bench linear $tokens rc=$?"
  grep -E "target met" "$OUT/linear_$tokens.txt" | cut -c1-700
done
kill $smi
