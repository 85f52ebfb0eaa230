#!/usr/bin/env bash
# Fiftieth session, call 3 (carry .whl), for the last ~250 s of a 385 s budget: on any card the re-quantizer's
# programs in other orders, timed first (`requant_order.py bench`; its bits were checked in call 1 on an H100, the
# same SASS on every sm_90 card), then its bits on this card, then on an H200 the cp.async ring's bench (its bits
# checked in the forty-ninth session's call 1).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
source scripts/device_env.sh
probe=benchmarks/2026-12-07/s50_calls/requant_order.py
timeout 100 python3 $probe bench 30 2>&1 | grep -v Warning | tee "$OUT/order_bench.txt"
echo "order bench rc=${PIPESTATUS[0]}"
timeout 60 python3 $probe check 2>&1 | grep -v Warning | tail -n 7 | tee "$OUT/order_check.txt"
echo "order check rc=${PIPESTATUS[0]}"
case "$card" in
  *H200*)
    timeout 90 python3 benchmarks/2026-12-06/s49_calls/requant_ring.py bench 30 2>&1 | grep -v Warning \
      | tee "$OUT/ring_bench.txt"
    echo "ring bench rc=${PIPESTATUS[0]}" ;;
esac
