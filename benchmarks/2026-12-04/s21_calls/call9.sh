#!/usr/bin/env bash
# Call 9 (twenty-first session): the re-quantizer's new default launch config (32 columns, 2 warps, from call 8's
# sweep) against the reference, every activation format, both rounding paths.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_quant_gpu.py -k "fused_requantize" \
  > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -n 3 "$OUT/tests.log"
