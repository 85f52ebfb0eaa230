"""Warp-stall samples per SASS line from Nsight Compute's source page (`ncu -i R --page source --csv
--print-source sass`): the share of each stall reason, then every line with at least 1% of the samples, with
its executions (64 programs: 64 a warp a program, 256 for the MMA warpgroup's four warps) and its largest reason.

    python3 benchmarks/2026-12-06/s44_calls/source_stalls.py source.csv
"""
import csv
import sys

lines = open(sys.argv[1]).read().splitlines()
rows = list(csv.DictReader(lines[next(i for i, line in enumerate(lines) if line.startswith('"Address"')):]))
SAMPLES = "Warp Stall Sampling (All Samples)"
reasons = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c]
total = sum(float(r[SAMPLES] or 0) for r in rows)
print(f"{len(rows)} SASS lines, {total:.0f} samples")
for reason, n in sorted(((c, sum(float(r[c] or 0) for r in rows)) for c in reasons), key=lambda x: -x[1])[:8]:
    print(f"  {reason:<24} {n / total:6.1%}")
for i, r in enumerate(rows):
    n = float(r[SAMPLES] or 0)
    if n / total >= 0.01:
        top = max(reasons, key=lambda c: float(r[c] or 0))
        print(f"{i:5d} {n / total:6.1%} x{r['Instructions Executed']:>5} {r['Source'].strip()[:64]:<64} {top}")
