"""Where the eager fp8_bi_wblocks step's host time goes, function by function (4096x4096, 8192 tokens): cProfile
over 20 steps issued while the GPU spins (no waits), sorted by own time and by cumulative time, after the same
20 steps timed without the profiler. The fortieth session's host_glue.py measured the step at 1.78-1.95 ms
and its launches, called alone, at about 0.62 ms."""

import cProfile
import io
import pstats
import time

import torch

from precision_engine.bench.linear import _specs, _train_step
from precision_engine.numerics.linear import Fp8Linear

spec, numerics = _specs()["fp8_bi_wblocks"]
layer = Fp8Linear.from_linear(torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16), spec,
                              numerics=numerics)
x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    _train_step(layer, x, dy)
torch.cuda.synchronize()
for trial in range(2):
    torch.cuda._sleep(int(2e8))
    start = time.perf_counter()
    for _ in range(20):
        _train_step(layer, x, dy)
    print(f"trial {trial}: host us a step {(time.perf_counter() - start) / 20 * 1e6:.1f}")
    torch.cuda.synchronize()
profile = cProfile.Profile()
torch.cuda._sleep(int(4e8))
profile.enable()
for _ in range(20):
    _train_step(layer, x, dy)
profile.disable()
torch.cuda.synchronize()
for key in ("tottime", "cumtime"):
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats(key).print_stats(45)
    print(out.getvalue())
