"""Where one FP8 linear training step's time goes, ours beside torchao's Float8BlockwiseLinear and BF16, in one
process: per step, the GPU time of each kernel, the GPU span (first kernel start to last kernel end), the idle
gaps inside it (the host not ahead of the GPU) with the kernel each gap precedes, and the host's own time to
issue the step (wall time of the Python call, GPU not waited for). Then `bench linear --quick` with torchao in the
same process, so torchao's autotuning (in-process caches only) is paid once.
Usage: python step_timeline.py OUT_DIR"""
import json
import sys
import time
from collections import defaultdict

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from precision_engine.bench import torchao_ref
from precision_engine.bench.linear import _specs, _train_step, bench_linear, format_table
from precision_engine.numerics.linear import Fp8Linear

out_dir = sys.argv[1]
VARIANTS = ["bf16", "fp8_cublas", "fp8_bi", "torchao"]
STEPS = 10
report = {}


def timeline(layer, x, dy):
    for _ in range(3):
        _train_step(layer, x, dy)
    torch.cuda.synchronize()
    host = []
    for _ in range(STEPS):  # the issue time alone: the GPU is drained between steps, so the queue never blocks
        torch.cuda._sleep(int(3e6))  # ~1.5 ms of GPU sleep: the host runs ahead, never waits on a full queue
        start = time.perf_counter()
        _train_step(layer, x, dy)
        host.append((time.perf_counter() - start) * 1e3)
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            torch.cuda._sleep(int(3e6))
            _train_step(layer, x, dy)
            torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                      and "sleep" not in e.name and "spin" not in e.name), key=lambda e: e.time_range.start)
    steps, current, last_end = [], [], None
    for e in kernels:  # a step starts after a gap of > 500 us (the sleep between steps)
        if last_end is not None and e.time_range.start - last_end > 500:
            steps.append(current)
            current = []
        current.append(e)
        last_end = e.time_range.end
    steps.append(current)
    per_kernel = defaultdict(float)
    spans, busy, gaps = [], [], defaultdict(list)
    for step in steps:
        spans.append((step[-1].time_range.end - step[0].time_range.start) / 1e3)
        busy.append(sum(e.time_range.elapsed_us() for e in step) / 1e3)
        for e in step:
            per_kernel[e.name[:90]] += e.time_range.elapsed_us() / 1e3 / len(steps)
        for prev, nxt in zip(step, step[1:]):
            gaps[nxt.name[:60]].append((nxt.time_range.start - prev.time_range.end) / 1e3)
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    return {"host_issue_ms": med(host), "gpu_span_ms": med(spans), "gpu_busy_ms": med(busy),
            "kernels_per_step": med([len(s) for s in steps]),
            "per_kernel_ms": dict(sorted(per_kernel.items(), key=lambda kv: -kv[1])),
            "gap_before_ms": {k: round(med(v), 4) for k, v in sorted(gaps.items(), key=lambda kv: -med(kv[1]))}}


for n, k, m in [(14336, 4096, 8192), (4096, 4096, 8192)]:
    lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    layers = {"bf16": lin}
    for name, (spec, numerics) in _specs().items():
        layers[name] = Fp8Linear.from_linear(lin, spec, numerics=numerics)
    layers["torchao"] = torchao_ref.blockwise_linear(lin)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    for name in VARIANTS:
        r = timeline(layers[name], x, dy)
        report[f"{n}x{k} M={m} {name}"] = r
        print(f"== {n}x{k} M={m} {name}: host issue {r['host_issue_ms']:.3f} ms, GPU span {r['gpu_span_ms']:.3f}, "
              f"busy {r['gpu_busy_ms']:.3f}, {r['kernels_per_step']} kernels", flush=True)
        for key, ms in list(r["per_kernel_ms"].items())[:8]:
            print(f"     {ms:7.4f}  {key}")
        print("     largest gaps (ms before kernel):", list(r["gap_before_ms"].items())[:4])
    del layers, x, dy, lin
    torch.cuda.empty_cache()
with open(f"{out_dir}/step_timeline.json", "w") as f:
    json.dump(report, f, indent=1)

rows = bench_linear(quick=True, variants=VARIANTS)
with open(f"{out_dir}/bench_linear_torchao.json", "w") as f:
    json.dump({"rows": rows}, f, indent=1)
print(format_table(rows))
