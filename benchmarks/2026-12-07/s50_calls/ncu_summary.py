"""Prints, from `ncu --page raw --csv` of `ncu_requant.py`'s launches, one line per kernel launch: its duration,
DRAM bytes read and written and their share of peak, L2 store sectors a request, and its three longest stalls."""
import csv
import sys

COLUMNS = {"gpu__time_duration.sum": "us", "dram__bytes_read.sum": "rd", "dram__bytes_write.sum": "wr",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram%",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "st sect",
           "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "st req",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "ld sect",
           "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "ld req",
           "sm__warps_active.avg.pct_of_peak_sustained_active": "occ%"}
STALL = "smsp__average_warps_issue_stalled_"

lines = [line for line in open(sys.argv[1]) if line.startswith('"')]
rows = list(csv.reader(lines))
header, units, data = rows[0], rows[1], rows[2:]
for row in data:
    r = dict(zip(header, row))
    cells = []
    for key, short in COLUMNS.items():
        value, unit = r.get(key, "?"), units[header.index(key)] if key in header else ""
        cells.append(f"{short} {value}{unit and ' ' + unit}")
    stalls = sorted(((float(v.replace(",", "")), k[len(STALL):].removesuffix("_per_issue_active.ratio"))
                     for k, v in r.items() if k.startswith(STALL) and k.endswith("_per_issue_active.ratio")
                     and v.replace(",", "").replace(".", "").isdigit()), reverse=True)[:3]
    print(f"{r.get('ID')} {r.get('Kernel Name', '')[:40]:<40} | " + " | ".join(cells)
          + " | stalls " + ", ".join(f"{k} {v:.2f}" for v, k in stalls))
