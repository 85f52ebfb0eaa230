"""Probe (seventeenth session, call 4): why the batch-invariant FP8 training step is slower eagerly than the
cuBLAS one on 4096x4096 at 8192 tokens (call 3: fp8_bi 0.85x, fp8_cublas 1.24x BF16) when graphed they are level
(1.30 / 1.27x) and the two differ only in the forward GEMM's launch (pinned cuBLASLt / torch._scaled_mm).

Per variant, alternating, three rounds: the step timed as bench linear does (200 us GPU lead), with a 5 ms lead
(the GPU's time alone), and the host's issue time with the GPU kept busy; then torch.profiler's CPU-side table
(CUDA runtime calls included) for a few steps of each, where a hidden synchronisation would show.
"""

import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from precision_engine.bench.linear import PASSES, _input_sets
from precision_engine.bench.timing import time_cuda

VARIANTS = ("bf16", "fp8_cublas", "fp8_bi")


def host_ms(fn, sets, n=30):
    torch.cuda.synchronize()
    torch.cuda._sleep(300_000_000)
    start = time.perf_counter()
    for i in range(n):
        fn(*sets[i % len(sets)])
    took = (time.perf_counter() - start) * 1e3 / n
    torch.cuda.synchronize()
    return took


def main():
    for n, k in ((4096, 4096), (14336, 4096)):
        sets = _input_sets(n, k, 8192, VARIANTS[1:], seed=0, device="cuda")
        step = PASSES["fwd+bwd"]
        fns = {v: (lambda layers, x, dy, v=v: step(layers[v], x, dy)) for v in VARIANTS}
        for fn in fns.values():
            for s in sets:
                fn(*s)
        cells = {v: {"lead200": [], "lead5ms": [], "host": []} for v in VARIANTS}
        for _ in range(3):
            for v, fn in fns.items():
                cells[v]["lead200"].append(statistics.median(time_cuda(fn, warmup=3, reps=20, inputs_rotation=sets)))
                cells[v]["lead5ms"].append(statistics.median(time_cuda(fn, warmup=3, reps=20, inputs_rotation=sets,
                                                                       host_lead_us=5000)))
                cells[v]["host"].append(host_ms(fn, sets))
        print(f"{n}x{k} fwd+bwd at 8192 tokens, ms (three rounds):")
        for v in VARIANTS:
            c = cells[v]
            print(f"  {v:>10}: lead 200us {' '.join(f'{t:.3f}' for t in c['lead200'])} | lead 5ms "
                  f"{' '.join(f'{t:.3f}' for t in c['lead5ms'])} | host issue {' '.join(f'{t:.3f}' for t in c['host'])}")
        for v in VARIANTS[1:]:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for i in range(10):
                    fns[v](*sets[i % len(sets)])
                torch.cuda.synchronize()
            print(f"--- profiler, {v}, {n}x{k}, 10 steps, by self CPU time")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=48))


if __name__ == "__main__":
    main()
