#!/usr/bin/env bash
# Call 6 (twenty-second session): the chain decode's new launch rules (`chain_config`, from calls 4-5): bits (GPU
# tests, chain and the engine's on-policy decode), the whole linear against its ceiling (`bench ceiling
# --decode`), and PC sampling at M = 16 and 64 on 4096x14336 (what the staged-scale kernel now waits on).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -m gpu -p no:cacheprovider"
timeout 200 $T tests/numerics/gpu/test_gemm_gpu.py tests/rl/gpu > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests.log" | tail -n 8 | cut -c1-300
timeout 150 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling --decode \
  --out "$OUT/decode_ceiling.json" > "$OUT/decode_ceiling.txt" 2>&1
echo "decode ceiling rc=$?"; grep -E "^ +[0-9]+x" "$OUT/decode_ceiling.txt" | head -24 | cut -c1-120
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 150 $NCU --clock-control none -k regex:_gluon_chain --launch-skip 9 --launch-count 3 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight -o "$OUT/chain" -f \
  python3 scripts/ncu_chain_decode.py > "$OUT/ncu_run.txt" 2>&1
echo "ncu rc=$?"
for i in 0 2; do
  timeout 60 $NCU -i "$OUT/chain.ncu-rep" --page source --csv --print-source sass --kernel-name regex:_gluon_chain \
    --launch-skip $i --launch-count 1 > "$OUT/sass_$i.csv" 2>&1
  echo "source page $i rc=$?"
done
timeout 60 $NCU -i "$OUT/chain.ncu-rep" --page details > "$OUT/details.txt" 2>&1
grep -E "Duration|DRAM Throughput|Memory Throughput" "$OUT/details.txt" | head -9
rm -f "$OUT/chain.ncu-rep"
