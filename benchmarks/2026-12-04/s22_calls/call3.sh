#!/usr/bin/env bash
# Call 3 (twenty-second session): PC sampling on the chain decode, 4096x14336 at M = 1 and 16 (call 2: ~185 ns per
# K block at M = 16 against ~131 ns the weight's stream needs from 64 programs): which instructions its warps
# stall on, as SASS with stall samples (CSV).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 300 $NCU --clock-control none -k regex:_gluon_chain --launch-skip 7 --launch-count 3 \
  --section SourceCounters --section WarpStateStats --import-source yes -o "$OUT/chain" -f \
  python3 scripts/ncu_chain_decode.py > "$OUT/ncu_run.txt" 2>&1
echo "ncu rc=$?"; tail -3 "$OUT/ncu_run.txt"
for i in 0 2; do
  timeout 60 $NCU -i "$OUT/chain.ncu-rep" --page source --csv --print-source sass --kernel-name regex:_gluon_chain \
    --launch-skip $i --launch-count 1 > "$OUT/sass_$i.csv" 2>&1
  echo "source page $i rc=$? lines $(wc -l < "$OUT/sass_$i.csv")"; head -c 600 "$OUT/sass_$i.csv"; echo
done
