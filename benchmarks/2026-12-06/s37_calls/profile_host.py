"""Where the batch-invariant FP8 linear's eager fwd+bwd spends host time (about 2 ms a step on the H200 in call 2
of the thirty-seventh session, against 0.2 ms for BF16): 4096x4096, 8192 tokens, as `bench linear` steps it. Prints
the CUDA kernels a step launches (torch.profiler) and cProfile's top functions by own time over 50 steps."""

import cProfile
import pstats
import time

import torch

from precision_engine.bench.linear import _specs, _train_step
from precision_engine.numerics.linear import Fp8Linear

lin = torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
spec, numerics = _specs()["fp8_bi"]
layer = Fp8Linear.from_linear(lin, spec, numerics=numerics)
x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(10):
    _train_step(layer, x, dy)
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    _train_step(layer, x, dy)
    torch.cuda.synchronize()
kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
print(f"CUDA kernels a step: {len(kernels)}")
for e in kernels:
    print(f"  {e.name[:110]}")
start = time.perf_counter()
with cProfile.Profile() as p:
    for _ in range(50):
        _train_step(layer, x, dy)
host = (time.perf_counter() - start) / 50 * 1e3
torch.cuda.synchronize()
print(f"host ms a step under cProfile: {host:.3f}")
pstats.Stats(p).sort_stats("tottime").print_stats(40)
