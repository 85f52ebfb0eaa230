#!/usr/bin/env bash
# Fifty-fourth session, call 0 (carry .whl): on an H200 the fifty-third session's call 7 (about 6 minutes); on any
# other card `ring_context.py` only (each layout's ring and tiles behind a copy, their dgrad GEMM, themselves; under
# a minute), which also runs that script on a GPU for the first time before an H200 call depends on it.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
case "$card" in *H200*) exec bash benchmarks/2026-12-07/s53_calls/call7.sh ;; esac
source scripts/device_env.sh
timeout 120 python3 benchmarks/2026-12-07/s53_calls/ring_context.py 30 > "$OUT/ring_context.txt" 2>&1
echo "ring_context rc=$?"; cut -c1-160 "$OUT/ring_context.txt" | grep -v Warning
