#!/usr/bin/env bash
# Fiftieth session, call 1 (carry .whl and .dg). On any card first the re-quantizer's programs in other orders
# (`order_steps`). On an H200 then the cp.async ring re-quantizer's bits and its variants in turns with the
# shipped kernel and a copy (the forty-ninth session's `ring_steps`, run there on an H100 only), Nsight Compute on
# the shipped kernel beside a copy of the same bytes (`ncu_requant`), and the swap probe of
# `s47_calls/next/README.md` while the call has time. On any other card then torchao in turns at 16384 tokens
# (`s49_calls/call2.sh`). Steps end by END_S seconds into the call (default 570).
set -u
cd "$(dirname "$0")/../../.."
END_S=${END_S:-570}
source scripts/device_card.sh
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
source benchmarks/2026-12-07/s50_calls/steps.sh
order_steps
case "$card" in
  *H200*)
    ring_steps
    seconds_left $((END_S - 150)) && ncu_requant 150
    seconds_left $END_S || exit 0
    probe_step swap $left benchmarks/2026-12-06/s42_calls/swap_probe.py --shapes 4096x4096,6144x4096 \
      --tokens 1,8,16,24,32 --rounds 3 ;;
  *) END_S=$((END_S - SECONDS)) bash benchmarks/2026-12-06/s49_calls/call2.sh ;;
esac
