#!/usr/bin/env bash
# Forty-fourth session, call 1 (carry .whl; any Hopper card; a tree with prefetch_kb.patch applied): the
# weight's first K blocks sent to L2 before the chain decode's PDL wait (`prefetch_probe.py`: bits, then the whole
# linear and the GEMM alone in turns with BF16, and the quantizer alone), then on an H200 only, decode in rounds on
# the shipped launch (`bench linear`).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
timeout ${PROBE_S:-300} python3 benchmarks/2026-12-06/s44_calls/prefetch_probe.py ${PROBE_ARGS:-} 2>&1 \
  | grep -v Warning | tee "$OUT/prefetch.txt"
echo "probe rc=${PIPESTATUS[0]}"
case "$card" in *H200*) ;; *) exit 0 ;; esac
timeout ${DECODE_S:-200} python3 -c "from precision_engine.cli.app import main; main()" bench linear \
  --tokens 1,8,16,24,32,40,48,56,64 --variants bf16,fp8_bi --rounds 3 --out "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
echo "decode rc=$?"; grep -E "target met" "$OUT/decode.txt" | cut -c1-1500
