#!/usr/bin/env bash
# Call 5: the persistent re-quantizer (requant_probe.py: bits against the one-item kernel and the reference,
# speed against it and a copy), its GPU tests, then the whole linear's decode against its ceiling with the
# narrow weight tiles above 32 tokens (ccd5f66).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 150 python3 benchmarks/2026-12-04/s23_calls/requant_probe.py "$OUT/requant.json" > "$OUT/requant.log" 2>&1
echo "requant probe rc=$?"; grep -v Warning "$OUT/requant.log" | tail -n 22 | cut -c1-200
T="python3 -m pytest -q -rf -p no:cacheprovider"
timeout 150 $T -m gpu tests/numerics/gpu/test_quant_gpu.py -k "requant or tokens or grad_output or full_size_bitwise" > "$OUT/tests_quant.log" 2>&1
echo "quant tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/tests_quant.log" | tail -n 6 | cut -c1-300
timeout 150 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling --decode \
  --out "$OUT/decode_ceiling.json" > "$OUT/decode_ceiling.txt" 2>&1
echo "decode ceiling rc=$?"; grep -E "^ +[0-9]+x" "$OUT/decode_ceiling.txt" | head -24 | cut -c1-70
