#!/usr/bin/env bash
# Forty-ninth session, call 1 (carry .whl and .dg). On any Hopper card: the re-quantizer fed through a cp.async
# ring (`requant_ring.py`): its bytes against the Triton kernel's, bitwise, then every ring variant, the shipped
# Gluon kernel and a copy of the same bytes in turns. Then, on an H200 only, the swap probe of the forty-seventh
# session's plan (`s47_calls/next/README.md`: fitted weight tiles on 4096x4096 and the fused qkv in decode).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
source scripts/device_env.sh
ring=benchmarks/2026-12-06/s49_calls/requant_ring.py
timeout ${CHECK_S:-150} python3 $ring check 2>&1 | grep -v Warning | tail -n 12 | tee "$OUT/ring_check.txt"
echo "ring check rc=${PIPESTATUS[0]}"
timeout ${RING_S:-150} python3 $ring bench 30 2>&1 | grep -v Warning | tee "$OUT/ring_bench.txt"
echo "ring bench rc=${PIPESTATUS[0]}"
only_on H200
timeout ${SWAP_S:-200} python3 benchmarks/2026-12-06/s42_calls/swap_probe.py --shapes 4096x4096,6144x4096 \
  --tokens 1,8,16,24,32 --rounds 3 2>&1 | grep -v Warning | tee "$OUT/swap.txt"
echo "swap rc=${PIPESTATUS[0]}"
