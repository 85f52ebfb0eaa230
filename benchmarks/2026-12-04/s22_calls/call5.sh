#!/usr/bin/env bash
# Call 5 (twenty-second session): ring depth and trip length around the shipped chain configs at every token
# width, on the staged-scale kernel (scale_tune.py --round 2); the whole linear's decode against its ceiling
# (`precision bench ceiling --decode`).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 240 python3 benchmarks/2026-12-04/s22_calls/scale_tune.py "$OUT/tune2.json" --round 2 > "$OUT/tune2.log" 2>&1
echo "tune rc=$?"; grep -v "^\s*$" "$OUT/tune2.log" | grep -v Warning | tail -n 31 | cut -c1-300
timeout 200 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling --decode \
  --out "$OUT/decode_ceiling.json" > "$OUT/decode_ceiling.txt" 2>&1
echo "decode ceiling rc=$?"; grep -E "^ +[0-9]+x" "$OUT/decode_ceiling.txt" | cut -c1-175
