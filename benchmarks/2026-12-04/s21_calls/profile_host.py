"""Where an eager FP8 linear's host time goes: the Python and launch cost of one training step (and of a no-grad
forward), next to BF16's. Not part of the package: a device-call tool for issue 12, whose eager rows are
host-bound where the GPU work is small (4096x4096 at 8192 tokens: the FP8 step issues for about 1.5 ms against
0.8 ms of GPU work, `bench linear`'s "host / GPU ms").

Prints the host ms to issue each call with the GPU kept busy (`timing.host_issue_ms`), then cProfile of 30
fp8_bi training steps, by own time and by cumulative time.

    python benchmarks/2026-12-04/s21_calls/profile_host.py [--n 4096 --k 4096 --tokens 8192]
"""

import argparse
import cProfile
import pstats

import torch
from torch import nn

from precision_engine.bench.linear import _forward, _specs, _train_step
from precision_engine.bench.timing import host_issue_ms
from precision_engine.numerics.gemm import deep_gemm_available
from precision_engine.numerics.linear import Fp8Linear

parser = argparse.ArgumentParser()
parser.add_argument("--n", type=int, default=4096)
parser.add_argument("--k", type=int, default=4096)
parser.add_argument("--tokens", type=int, default=8192)
args = parser.parse_args()
torch.manual_seed(0)
lin = nn.Linear(args.k, args.n, bias=False, device="cuda", dtype=torch.bfloat16)
spec, numerics = _specs()["fp8_bi"]
layers = {"bf16": lin, "fp8_bi": Fp8Linear.from_linear(lin, spec, numerics=numerics)}
x = torch.randn(args.tokens, args.k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(args.tokens, args.n, device="cuda", dtype=torch.bfloat16)
print(f"deep_gemm {deep_gemm_available()}; N={args.n} K={args.k} M={args.tokens}")
for name, layer in layers.items():
    for step_name, step in (("fwd+bwd", _train_step), ("fwd no-grad", _forward)):
        for _ in range(5):
            step(layer, x, dy)
        ms = min(host_issue_ms(lambda layer, x, dy: step(layer, x, dy), [(layer, x, dy)]) for _ in range(5))
        print(f"host ms to issue, {name} {step_name}: {ms:.3f}")
torch.cuda.synchronize()
profiler = cProfile.Profile()
profiler.enable()
for _ in range(30):
    _train_step(layers["fp8_bi"], x, dy)
profiler.disable()
torch.cuda.synchronize()
stats = pstats.Stats(profiler)
stats.sort_stats("tottime").print_stats(45)
stats.sort_stats("cumulative").print_stats(60)
