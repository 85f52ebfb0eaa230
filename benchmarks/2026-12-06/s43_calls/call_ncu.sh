#!/usr/bin/env bash
# Forty-third session (carry .whl; any Hopper card): Nsight Compute on the decode of 4096x4096 and the fused qkv
# at M = 1, 24, 64 (`ncu_decode.py`): BF16's cuBLAS GEMM beside our token quantizer and chain decode; durations,
# DRAM and L2 bytes and throughput, SM throughput and grid size: whether ours streams the weight more slowly than
# cuBLAS streams twice the bytes, and what (L2 traffic of x re-read per program, SMs left idle) sets its pace.
# The last launch of each kind per row is the one to read (the first compiles).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics=$metrics,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed
metrics=$metrics,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,sm__cycles_active.avg
timeout ${NCU_S:-240} $NCU --clock-control none --csv --metrics $metrics \
  python3 benchmarks/2026-12-06/s43_calls/ncu_decode.py ${NCU_SHAPES:-} > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
echo "ncu rc=$?"
python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys
rows = [line for line in open(sys.argv[1]) if line.startswith('"')]
table, short = {}, {"gpu__time_duration.sum": "time", "dram__bytes_read.sum": "dram rd",
                    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram%", "lts__t_bytes.sum": "L2 bytes",
                    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "L2%",
                    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM%", "launch__grid_size": "grid",
                    "sm__cycles_active.avg": "SM cyc"}
for r in csv.DictReader(rows):
    key = (r["ID"], r["Kernel Name"][:48])
    table.setdefault(key, {})[short[r["Metric Name"]]] = f'{r["Metric Value"]} {r.get("Metric Unit", "")}'.strip()
print(f"{'ID':>4} {'kernel':<48} " + " ".join(f"{c:>14}" for c in short.values()))
for (i, name), v in table.items():
    if "randn" in name or "distribution" in name:
        continue
    print(f"{i:>4} {name:<48} " + " ".join(f"{v.get(c, '?'):>14}" for c in short.values()))
PY
grep -E "launched|rror" "$OUT/ncu.csv" "$OUT/ncu.err" | head -12
