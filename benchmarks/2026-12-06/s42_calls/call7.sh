#!/usr/bin/env bash
# Forty-second session, call 7 (carry .whl): Nsight Compute on the decode of 4096x4096 at M = 1, 24, 64, BF16's
# cuBLAS GEMM beside our token quantizer and chain decode (`ncu_decode_vs_bf16.py`): kernel durations and DRAM
# throughput, without the launch floor a graph replay's timing includes.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
timeout 200 $NCU --clock-control none --csv --metrics \
  gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
  python3 benchmarks/2026-12-06/s42_calls/ncu_decode_vs_bf16.py > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
echo "ncu rc=$?"
python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys
rows = [line for line in open(sys.argv[1]) if line.startswith('"')]
table = {}
for r in csv.DictReader(rows):
    key = (r["ID"], r["Kernel Name"][:60])
    table.setdefault(key, {})[r["Metric Name"]] = r["Metric Value"] + " " + r.get("Metric Unit", "")
for (i, name), v in table.items():
    print(f"{i:>4} {name:<60} {v.get('gpu__time_duration.sum', '?'):>14} {v.get('dram__bytes_read.sum', '?'):>14} "
          f"{v.get('dram__throughput.avg.pct_of_peak_sustained_elapsed', '?'):>8}")
PY
grep -E "launched|rror" "$OUT/ncu.csv" "$OUT/ncu.err" | head
