"""Direct launches off, then on, in one process: the FP8 linear bench rows (--quick shapes, no torchao) and the
host issue time of one training step (4096x4096, M = 8192)."""
import json, statistics, sys, time
import torch
from precision_engine.numerics import triton_launch as L
from precision_engine.bench.linear import bench_linear, format_table, _specs, _train_step
from precision_engine.numerics.linear import Fp8Linear

def host_us(layer, x, dy, steps=60):
    for _ in range(10): _train_step(layer, x, dy)
    hs = []
    for _ in range(steps):
        torch.cuda.synchronize(); t = time.perf_counter(); _train_step(layer, x, dy); hs.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    return statistics.median(hs) * 1e6

real = L.direct_launches
out = {}
for label, on in (("triton_path", False), ("direct", True), ("triton_path_again", False), ("direct_again", True)):
    L.direct_launches = (lambda: real()) if on else (lambda: False)
    lin = torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    hosts = {"bf16": host_us(lin, x, dy)}
    for name, (s, num) in _specs().items():
        hosts[name] = host_us(Fp8Linear.from_linear(lin, s, numerics=num), x, dy)
    print(f"== {label}: host us/step 4096x4096 M=8192: " + ", ".join(f"{k} {v:.0f}" for k, v in hosts.items()))
    if label.endswith("again"):
        out[label] = {"host_us": hosts}
        continue
    rows = bench_linear(quick=True, variants=("bf16", "fp8_cublas", "fp8_bi"))
    print(format_table(rows)); sys.stdout.flush()
    out[label] = {"host_us": hosts, "rows": rows}
json.dump(out, open(sys.argv[1], "w"), indent=1)
