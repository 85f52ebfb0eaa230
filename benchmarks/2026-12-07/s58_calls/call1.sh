#!/usr/bin/env bash
# Fifty-eighth session, call 1 (carry .whl): on an H200 only (call 0 ran every pending GPU test on an H100),
# `s57_calls/call2.sh`: ring_context.py and `bench quant` on AUTO's re-quantizer rows (about 190 s).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
only_on H200
bash benchmarks/2026-12-07/s57_calls/call2.sh
