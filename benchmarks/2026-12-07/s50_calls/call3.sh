#!/usr/bin/env bash
# Fiftieth session, call 3 (carry .whl), for the last ~250 s of a 385 s budget: on any card the re-quantizer's
# programs in other orders, timed first (`requant_order.py bench`; its bits were checked in call 1 on an H100, the
# same SASS on every sm_90 card), then its bits on this card, then on an H200 the cp.async ring's bench (its bits
# checked in the forty-ninth session's call 1).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
probe=benchmarks/2026-12-07/s50_calls/requant_order.py
probe_step order_bench 100 $probe bench 30
probe_step order_check 60 $probe check
case "$card" in
  *H200*) probe_step ring_bench 90 benchmarks/2026-12-06/s49_calls/requant_ring.py bench 30 ;;
esac
