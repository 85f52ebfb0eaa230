#!/usr/bin/env bash
# Prepared for the next device session (carry .whl; about 7 minutes with the start), either card: applies
# auto_ring.patch (AUTO's re-quantizer takes the ring program on the H200 only), then runs ../call1.sh: the
# re-quantizer's GPU bits tests (the ring with ring=True on any Hopper card, AUTO's dispatch), `bench quant --sweep`
# on AUTO's rows and the 8-warp programs with and without the ring in both layouts, then the linear's, graphs' and
# torch.compile's GPU tests while time is left. END_S bounds it (default 540 s into the call).
set -u
cd "$(dirname "$0")/../../../.."
git apply benchmarks/2026-12-07/s51_calls/next/auto_ring.patch 2>/dev/null \
  || patch -p1 < benchmarks/2026-12-07/s51_calls/next/auto_ring.patch || exit 4
bash benchmarks/2026-12-07/s51_calls/call1.sh
