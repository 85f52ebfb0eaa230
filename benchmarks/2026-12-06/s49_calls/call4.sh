#!/usr/bin/env bash
# Forty-ninth session, call 4 (carry .whl), for the last ~280 s of device time, H200 only (too little time for
# torchao's autotuning elsewhere): call 3's H200 branch, the swap probe bounded at END_S (250 s).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
only_on H200
END_S=${END_S:-250} bash benchmarks/2026-12-06/s49_calls/call3.sh
