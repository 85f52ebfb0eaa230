# Sourced from the repository root by calls 2 and 3 (and the fiftieth session's calls), after
# scripts/device_card.sh and scripts/device_env.sh: the steps they share.
# `probe_step LABEL SECONDS SCRIPT ARGS...`: `python3 SCRIPT ARGS` under that timeout, Triton's warnings dropped,
# its output shown and kept in $OUT/LABEL.txt, then its exit status.
# `ring_steps`: the cp.async ring re-quantizer's bits, then its variants in turns with the shipped kernel and a
# copy (`requant_ring.py`), 90 s each.
# `torchao_16k SECONDS LINES [ARGS...]`: `precision bench linear` at 16384 tokens, BF16, fp8_bi_wblocks and
# torchao's two variants (torchao from /tmp/ao), with ARGS (say --shapes); its verdict lines and last LINES rows.
# `seconds_left END`: what is left of the call until END seconds into it, and a non-zero status when nothing is
# (`timeout 0` would lift the bound instead).
probe_step() {
  local label=$1 seconds=$2
  shift 2
  timeout "$seconds" python3 "$@" 2>&1 | grep -v Warning | tee "$OUT/$label.txt"
  echo "$label rc=${PIPESTATUS[0]}"
}
ring_steps() {
  local ring=benchmarks/2026-12-06/s49_calls/requant_ring.py
  probe_step ring_check 90 $ring check
  probe_step ring_bench 90 $ring bench 30
}
torchao_16k() {
  local seconds=$1 lines=$2
  shift 2
  PYTHONPATH=/tmp/ao:$PYTHONPATH timeout "$seconds" python3 -c "from precision_engine.cli.app import main; main()" \
    bench linear --tokens 16384 --variants bf16,fp8_bi_wblocks,torchao,torchao_triton "$@" \
    --out "$OUT/torchao16k.json" > "$OUT/torchao16k.txt" 2>&1
  echo "torchao rc=$?"; grep -E "ahead|target met" "$OUT/torchao16k.txt" | cut -c1-400
  tail -n "$lines" "$OUT/torchao16k.txt" | cut -c1-200
}
seconds_left() {
  left=$(($1 - SECONDS))
  [ "$left" -gt 0 ] || { echo "no time left before ${1} s into the call"; return 1; }
}
