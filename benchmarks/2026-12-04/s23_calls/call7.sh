#!/usr/bin/env bash
# Call 7 (on call 6's warm machine): the whole linear on 12288x4096 at M = 64, the shipped launch against 64-row
# weight tiles on the narrow side at two an SM, bits first (w64_whole.py).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 90 python3 benchmarks/2026-12-04/s23_calls/w64_whole.py 2>&1 | grep -v Warn | tail -10
