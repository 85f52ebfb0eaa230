#!/usr/bin/env bash
# Fifty-fourth session, call 5 (carry .whl): on an H200 `call4.sh` (about 5 minutes); on any other card `bench quant`
# on call 2's rows with the re-quantizers now timed behind the FP8 dgrad AUTO runs (calls 2-3: a BF16 one), and the
# bench's GPU test of that dgrad (under a minute).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
case "$card" in *H200*) exec bash benchmarks/2026-12-07/s54_calls/call4.sh ;; esac
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
gpu_tests dgrad 60 tests/bench/test_bench_quant.py
timeout 120 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
  --only "requant fp8 ->,requant fp8 triton,requant blocks triton,gluon w8 t8,blocks gluon t8" \
  --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
echo "bench quant rc=$?"; grep -E "requant|copy|GB/s" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150
