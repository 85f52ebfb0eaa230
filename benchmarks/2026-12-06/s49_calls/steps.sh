# Sourced from the repository root by calls 2 and 3, after scripts/device_card.sh and scripts/device_env.sh: the
# steps they share. `ring_steps`: the cp.async ring re-quantizer's bits, then its variants in turns with the
# shipped kernel and a copy (`requant_ring.py`), 90 s each. `seconds_left END`: what is left of the call until END
# seconds into it, and a non-zero status when nothing is (`timeout 0` would lift the bound instead).
ring_steps() {
  local ring=benchmarks/2026-12-06/s49_calls/requant_ring.py
  timeout 90 python3 $ring check 2>&1 | grep -v Warning | tail -n 6 | tee "$OUT/ring_check.txt"
  echo "ring check rc=${PIPESTATUS[0]}"
  timeout 90 python3 $ring bench 30 2>&1 | grep -v Warning | tee "$OUT/ring_bench.txt"
  echo "ring bench rc=${PIPESTATUS[0]}"
}
seconds_left() {
  left=$(($1 - SECONDS))
  [ "$left" -gt 0 ] || { echo "no time left before ${1} s into the call"; return 1; }
}
