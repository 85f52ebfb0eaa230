#!/usr/bin/env bash
# Fifty-fourth session, call 1 (carry .whl): on an H200 the fifty-third session's call 7 (about 6 minutes); on any
# other card `ring_context.py` twice at 60 repetitions (under a minute): does call 0's H100 finding hold, that
# behind the dgrad GEMM (the re-quantizer's predecessor in the backward) the ring leads on 7 of 8 rows?
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
case "$card" in *H200*) exec bash benchmarks/2026-12-07/s53_calls/call7.sh ;; esac
source scripts/device_env.sh
for run in 1 2; do
  timeout 100 python3 benchmarks/2026-12-07/s53_calls/ring_context.py 60 > "$OUT/ring_context$run.txt" 2>&1
  echo "ring_context $run rc=$?"; cut -c1-160 "$OUT/ring_context$run.txt" | grep -v Warning
done
