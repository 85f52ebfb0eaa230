#!/usr/bin/env bash
# Fifty-fourth session, call 2 (carry .whl): on an H200 the fifty-third session's call 7 (about 6 minutes, its
# `bench quant` now with % dgrad); on any other card `bench quant` on call 7's rows, each re-quantizer timed behind
# a copy of its bytes and behind its dgrad GEMM (under a minute).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
case "$card" in *H200*) exec bash benchmarks/2026-12-07/s53_calls/call7.sh ;; esac
source scripts/device_env.sh
timeout 200 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
  --only "requant fp8 ->,requant fp8 triton,requant blocks triton,gluon w8 t8,blocks gluon t8" \
  --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
echo "bench quant rc=$?"; grep -E "requant|copy|GB/s" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150
