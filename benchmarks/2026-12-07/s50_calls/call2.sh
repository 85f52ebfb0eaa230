#!/usr/bin/env bash
# Fiftieth session, call 2 (carry .whl and .dg), for the last ~600 s of device time. On an H200: the re-quantizer's
# programs in other orders (`order_steps`; call 1 ran them on an H100), the cp.async ring (`ring_steps`), then
# Nsight Compute on the shipped re-quantizer (`ncu_requant`). On any other card: torchao in turns at 16384 tokens on
# the three shapes call 1's run did not reach before its timeout. Steps end by END_S seconds into the call
# (default 450).
set -u
cd "$(dirname "$0")/../../.."
END_S=${END_S:-450}
source scripts/device_card.sh
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
source benchmarks/2026-12-07/s50_calls/steps.sh
case "$card" in
  *H200*)
    order_steps
    ring_steps
    seconds_left $END_S && ncu_requant $left ;;
  *)
    source scripts/device_deep_gemm.sh
    seconds_left $END_S || exit 0
    torchao_16k $left 12 --shapes 4096x12288,6144x4096,28672x4096 ;;
esac
