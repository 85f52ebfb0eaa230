"""Summarise ncu's source page CSV: SASS lines with the most stall samples, with their top reasons."""
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr_i = next(i for i, r in enumerate(rows) if any("Source" == c or "Address" in c for c in r))
hdr = rows[hdr_i]; body = rows[hdr_i + 1:]
print(hdr)
def num(x):
    try: return float(x.replace(",", ""))
    except: return 0.0
samp = [i for i, h in enumerate(hdr) if "Sampling" in h and "All" in h] or [i for i, h in enumerate(hdr) if "Samples" in h]
si = samp[0] if samp else None
print("sample col", si, hdr[si] if si is not None else None)
body.sort(key=lambda r: -num(r[si]) if si is not None and len(r) > si else 0)
tot = sum(num(r[si]) for r in body if len(r) > si)
for r in body[:45]:
    print(f"{num(r[si])/max(tot,1)*100:5.1f}%", " | ".join(c for c in r[:3])[:150])
