"""Where the host's time goes in one eager FP8 linear training step (cProfile, GPU kept busy so the host never
waits on it), and what a graphed step's kernels take (torch.profiler over graph replays of the bench's rotated
input sets), ours beside torchao at 4096x4096, M = 8192. Usage: python host_profile.py OUT_DIR"""
import cProfile
import io
import pstats
import sys
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from precision_engine.bench.linear import _input_sets, _train_step

out_dir = sys.argv[1]
n, k, m = 4096, 4096, 8192
sets = _input_sets(n, k, m, ["fp8_cublas", "fp8_bi", "torchao"], seed=0, device="cuda")
print(f"{len(sets)} input sets", flush=True)

for name in ["fp8_cublas", "torchao"]:
    step = lambda s: _train_step(s[0][name], s[1], s[2])  # noqa: E731
    for s in sets * 2:
        step(s)
    torch.cuda.synchronize()
    host = []
    for i in range(40):
        torch.cuda._sleep(int(8e6))  # ~4 ms of GPU sleep: the host issues the whole step before the GPU frees
        start = time.perf_counter()
        step(sets[i % len(sets)])
        host.append((time.perf_counter() - start) * 1e3)
        torch.cuda.synchronize()
    host.sort()
    print(f"== {name}: host issue per step (GPU asleep) median {host[len(host) // 2]:.3f} ms, min {host[0]:.3f}")
    prof = cProfile.Profile()
    for i in range(40):
        torch.cuda._sleep(int(8e6))
        prof.enable()
        step(sets[i % len(sets)])
        prof.disable()
        torch.cuda.synchronize()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text).sort_stats("tottime")
    stats.print_stats(30)
    stats.sort_stats("cumulative").print_stats(45)
    with open(f"{out_dir}/cprofile_{name}.txt", "w") as f:
        f.write(text.getvalue())
    lines = text.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "tottime" in line)
    print("\n".join(lines[start:start + 26]))

    # graphed: the bench's capture (one call per input set), then the replays' kernels
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for s in sets:
            step(s)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for s in sets:
            step(s)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            graph.replay()
        torch.cuda.synchronize()
    kernels = sorted((e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    per = defaultdict(float)
    for e in kernels:
        per[e.name[:80]] += e.time_range.elapsed_us() / 1e3 / (5 * len(sets))
    span = (kernels[-1].time_range.end - kernels[0].time_range.start) / 1e3 / (5 * len(sets))
    print(f"== {name} graphed: per step span {span:.4f} ms, kernels {sum(per.values()):.4f} ms, "
          f"{len(kernels) / (5 * len(sets)):.1f} kernels a step")
    for key, ms in sorted(per.items(), key=lambda kv: -kv[1])[:10]:
        print(f"     {ms:7.4f}  {key}")
    del graph
