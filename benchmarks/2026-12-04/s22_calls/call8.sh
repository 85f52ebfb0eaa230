#!/usr/bin/env bash
# Call 8 (twenty-second session): the chain decode with two programs an SM where its programs outnumber the SMs
# (`chain_config`'s per_sm, from call 7): bits (GPU test, now with the 12288-row weight and a two-per-SM config),
# the ptxas checks on this Triton, and the whole linear against its ceiling (`bench ceiling --decode`).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -p no:cacheprovider"
timeout 170 $T -m gpu tests/numerics/gpu/test_gemm_gpu.py -k chain_decode > "$OUT/tests_chain.log" 2>&1
echo "chain tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_chain.log" | tail -n 8 | cut -c1-300
timeout 60 $T tests/numerics/test_gluon_compile.py > "$OUT/tests_compile.log" 2>&1
echo "compile tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_compile.log" | tail -n 4 | cut -c1-300
timeout 150 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling --decode \
  --out "$OUT/decode_ceiling.json" > "$OUT/decode_ceiling.txt" 2>&1
echo "decode ceiling rc=$?"; grep -E "^ +[0-9]+x" "$OUT/decode_ceiling.txt" | head -24 | cut -c1-70
