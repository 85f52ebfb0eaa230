#!/usr/bin/env bash
# Forty-ninth session, call 3 (carry .whl and .dg), for the last ~490 s of device time: on an H200 the cp.async
# ring re-quantizer (bits, then in turns with the shipped kernel and a copy) and the swap probe of
# `s47_calls/next/README.md`; on any other card call 2's torchao run at 16384 tokens, bounded at END_S (470 s).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
case "$card" in
  *H200*)
    source scripts/device_env.sh
    source benchmarks/2026-12-06/s49_calls/steps.sh
    ring_steps
    seconds_left ${END_S:-470} || exit 0
    probe_step swap $left benchmarks/2026-12-06/s42_calls/swap_probe.py --shapes 4096x4096,6144x4096 \
      --tokens 1,8,16,24,32 --rounds 3 ;;
  *) END_S=${END_S:-470} bash benchmarks/2026-12-06/s49_calls/call2.sh ;;
esac
