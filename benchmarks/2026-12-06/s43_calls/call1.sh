#!/usr/bin/env bash
# Forty-third session, call 1 (carry .whl and .dg): the forty-second session's call 7 (Nsight Compute on the
# 4096x4096 decode, any Hopper card), then its call 6 (swap probe and decode in rounds; H200 only).
set -u
cd "$(dirname "$0")/../../.."
bash benchmarks/2026-12-06/s42_calls/call7.sh
PROBE_S=120 DECODE_S=170 bash benchmarks/2026-12-06/s42_calls/call6.sh
