import re, sys
blocks, cur = [], None
for line in open(sys.argv[1]):
    if re.match(r"\s+_gluon_chain\S* \(", line):
        cur = {"grid": re.search(r"\(([\d, ]+)\)x", line).group(1).replace(" ", "")}
        blocks.append(cur)
    elif cur is not None:
        parts = line.split()
        if len(parts) >= 3 and ("__" in parts[0]):
            name = parts[0].replace("smsp__average_warps_issue_stalled_", "st_").replace("_per_issue_active.ratio", "")
            cur[name] = parts[-1]
for i, b in enumerate(blocks):
    if i % 2 == 1:
        stalls = sorted(((float(v.replace(",", "")), k[3:]) for k, v in b.items() if k.startswith("st_")), reverse=True)[:6]
        print(b["grid"], "us", b.get("gpu__time_duration.sum"), "dram%", b.get("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
              "gmma%", b.get("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"),
              "issue%", b.get("smsp__issue_active.avg.pct_of_peak_sustained_active"),
              "inst", b.get("sm__inst_executed.sum"), "|", " ".join(f"{k}={v:.2f}" for v, k in stalls))
