#!/usr/bin/env bash
# Fifty-third session, call 2 (carry .whl; about 2 minutes with the start on an H100, 6 on an H200): does timing in
# turns on shared inputs flatter the later kernels (`turns_bias.py`)? On an H200 then `bench quant`'s ring rows
# (s51 call1.sh's sweep).
set -u
cd "$(dirname "$0")/../../.."
END_S=${END_S:-540}
source scripts/device_card.sh
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
timeout 240 python3 benchmarks/2026-12-07/s53_calls/turns_bias.py 30 > "$OUT/turns_bias.txt" 2>&1
echo "turns_bias rc=$?"; cut -c1-160 "$OUT/turns_bias.txt" | grep -v Warning
case "$card" in
  *H200*)
    seconds_left $((END_S - 30)) || exit 0
    timeout $left python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
      --only "requant fp8 ->,gluon w8 t8,blocks gluon t8" \
      --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
    echo "bench quant rc=$?"; grep -E "requant|copy" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150 ;;
esac
