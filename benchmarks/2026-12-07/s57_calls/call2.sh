#!/usr/bin/env bash
# Fifty-seventh session, call 2 (carry .whl). On an H200: the H200 half of `s56_calls/call3.sh` (its GPU tests passed
# on an H100 in calls 0 and 1): `ring_context.py`, then `bench quant` on AUTO's re-quantizer rows beside both
# programs, behind a copy and behind the FP8 dgrad. On any other card: the quantizer GPU tests the fifty-sixth
# session's call 2 had no time for (`quant_rest.txt`, tests 75-245 of test_quant_gpu.py, in collection order), 150 s.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
source scripts/device_env.sh
case "$card" in
  *H200*)
    timeout 60 python3 benchmarks/2026-12-07/s53_calls/ring_context.py 30 > "$OUT/ring_context.txt" 2>&1
    echo "ring_context rc=$?"; cut -c1-160 "$OUT/ring_context.txt" | grep -v Warning
    timeout 120 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
      --only "requant fp8 ->,requant fp8 triton,requant blocks triton,gluon w8 t8,blocks gluon t8" \
      --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
    echo "bench quant rc=$?"; grep -E "requant|copy" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150 ;;
  *)
    mapfile -t rest < benchmarks/2026-12-07/s57_calls/quant_rest.txt
    gpu_tests quant 150 "${rest[@]}" ;;
esac
