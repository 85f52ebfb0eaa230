"""Probe (seventeenth session): host time of one eager FP8 linear call, and where it goes.

The sixteenth session's eager rows lost most on small shapes (k/v fwd 0.47x eager, 1.06x graphed; 4096x4096
fwd+bwd 0.76x eager, 1.29x graphed): the host, not the GPU. Here the GPU is kept busy (a long spin) while the
host issues N calls, so perf_counter measures issue time alone; then cProfile says which Python functions take it.
"""

import cProfile
import io
import pstats
import time

import torch

from precision_engine.bench.linear import PASSES, _input_sets

N = 40


def host_ms(fn, sets):
    for s in sets[:3]:
        fn(*s)
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000 // 1000 * 200)  # ~200 ms of GPU spin: the queue never drains while we issue
    start = time.perf_counter()
    for i in range(N):
        fn(*sets[i % len(sets)])
    issued = (time.perf_counter() - start) * 1e3 / N
    torch.cuda.synchronize()
    return issued


if __name__ == "__main__":
    for n, k in ((4096, 4096), (1024, 4096)):
        names = ("fp8_bi", "fp8_cublas")
        sets = _input_sets(n, k, 8192, names, seed=0, device="cuda")[:4]
        for pass_ in ("fwd", "fwd+bwd"):
            step = PASSES[pass_]
            cells = []
            for name in ("bf16", *names):
                fn = lambda layers, x, dy: step(layers[name], x, dy)  # noqa: E731
                cells.append(f"{name} {host_ms(fn, sets):.3f}")
            print(f"{n}x{k} {pass_} host ms per call: " + ", ".join(cells))
        for pass_ in ("fwd", "fwd+bwd"):
            step = PASSES[pass_]
            fn = lambda layers, x, dy: step(layers["fp8_bi"], x, dy)  # noqa: E731
            profile = cProfile.Profile()
            torch.cuda._sleep(2_000_000_000 // 1000 * 200)
            profile.enable()
            for i in range(N):
                fn(*sets[i % len(sets)])
            profile.disable()
            torch.cuda.synchronize()
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(22)
            print(f"--- cProfile fp8_bi {n}x{k} {pass_}, {N} calls, by own time")
            print("\n".join(line for line in text.getvalue().splitlines()[6:] if line.strip()))
