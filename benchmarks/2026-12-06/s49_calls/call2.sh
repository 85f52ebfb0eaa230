#!/usr/bin/env bash
# Forty-ninth session, call 2 (carry .whl and .dg), on whichever Hopper card comes: on an H200 first the cp.async
# ring re-quantizer (`requant_ring.py`, its bits, then in turns with the shipped kernel and a copy; call 1 ran it
# on an H100), then on any card torchao's Float8BlockwiseLinear beside fp8_bi_wblocks in turns at 16384 tokens,
# the issue's second token count, never run in turns (torchao's first calls autotune for minutes).
# torchao runs until 575 s into the call (END_S), its rows kept as they come.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
case "$card" in *H200*) ring_steps ;; esac
source scripts/device_deep_gemm.sh
seconds_left ${END_S:-575} || exit 0
torchao_16k $left 30
