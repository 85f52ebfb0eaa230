#!/usr/bin/env bash
# Call 9 (twenty-second session): above 32 tokens, four 16-token programs per weight tile at two an SM
# (m64_probe.py), then the whole linear's decode with that rule patched in for the 4096-row weights.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 200 python3 benchmarks/2026-12-04/s22_calls/m64_probe.py "$OUT/m64.json" --ceiling "$OUT/decode_ceiling.json" \
  > "$OUT/m64.log" 2>&1
echo "probe rc=$?"; grep -E "M=|done" "$OUT/m64.log" | cut -c1-250; grep -E "^ +[0-9]+x" "$OUT/m64.log" | cut -c1-70
