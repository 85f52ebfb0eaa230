#!/usr/bin/env bash
# Call 2 (twenty-first session): `bench ceiling --decode` with the weight stream as one read (call 1 timed a copy,
# which our linear beat), then `bench linear` on every 8B shape at 8192 and 16384 tokens with torchao's
# Float8BlockwiseLinear beside ours, DeepGEMM installed (rows written as measured: a timeout keeps what ran).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
source scripts/device_deep_gemm.sh
timeout 120 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling --decode \
  --out "$OUT/decode_ceiling.json" > "$OUT/decode_ceiling.txt" 2>&1
echo "decode ceiling rc=$?"; grep -E "^ +[0-9]+x" "$OUT/decode_ceiling.txt" | cut -c1-150
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 440 python3 -c "from precision_engine.cli.app import main; main()" bench linear \
  --tokens 8192,16384 --variants bf16,fp8_bi,torchao --out "$OUT/bench_linear.json" > "$OUT/bench_linear.txt" 2>&1
echo "bench linear rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/bench_linear.txt" | tail -n 45 | cut -c1-220
