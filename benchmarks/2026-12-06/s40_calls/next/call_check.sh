#!/usr/bin/env bash
# Prepared in the fortieth session for the next device session (carry .whl and .dg; about 8 minutes on a Hopper
# GPU). The benches moved to turns after the device time ran out (1e41b5c), run once each at their quick sizes:
# bench kernels, ceiling and its decode twin, the invariant and sampling benches, and the GPU tests of tests/bench;
# and bench linear, whose turns moved onto gemm.timed_where_they_run in the review (b0204e9).
# Then torchao's Float8BlockwiseLinear beside fp8_bi_wblocks in turns at 8192 tokens (its first calls autotune for
# minutes; TORCHAO_S bounds it, and each row is written to the JSON as it comes).
set -u
cd "$(dirname "$0")/../../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
precision=(python3 -c "from precision_engine.cli.app import main; main()")
gpu_tests bench 150 tests/bench
for verb in kernels ceiling "ceiling --decode" "linear --rounds 2"; do
  name=${verb// /_}
  timeout 150 "${precision[@]}" bench $verb --quick --out "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
  echo "bench $verb rc=$?"; tail -n 4 "$OUT/$name.txt" | cut -c1-200
done
timeout 120 python3 -m precision_engine.bench.invariant --quick > "$OUT/invariant.txt" 2>&1
echo "invariant rc=$?"; tail -n 4 "$OUT/invariant.txt" | cut -c1-200
timeout 120 python3 -m precision_engine.bench.sampling > "$OUT/sampling.txt" 2>&1
echo "sampling rc=$?"; tail -n 4 "$OUT/sampling.txt" | cut -c1-200
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout ${TORCHAO_S:-300} "${precision[@]}" bench linear --tokens 8192 \
  --variants bf16,fp8_bi_wblocks,torchao,torchao_triton --out "$OUT/torchao.json" > "$OUT/torchao.txt" 2>&1
echo "torchao rc=$?"; grep -E "ahead|target met" "$OUT/torchao.txt" | cut -c1-400
