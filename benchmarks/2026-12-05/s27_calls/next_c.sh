#!/usr/bin/env bash
# Prepared in the twenty-seventh session, for the next one (carry .whl): the decode rows' x quantizer swept
# (decode_quant_sweep.py: 8 launch configs of the 1x128 rows kernel, the whole linear's decode against BF16 on
# the three shapes short of 1.5x, M = 8..64, two alternating rounds, bytes checked first). About 5 minutes.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 500 python3 benchmarks/2026-12-05/s27_calls/decode_quant_sweep.py "$OUT/decode_quant_sweep.json" 2>&1 \
  | grep -v "Warning\|warn(" | tee "$OUT/decode_quant_sweep.txt" | tail -n 20 | cut -c1-200
