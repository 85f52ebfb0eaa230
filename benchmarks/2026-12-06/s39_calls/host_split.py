"""The eager step's host time split (fp8_bi_wblocks and BF16, 4096x4096, 8192 tokens): the recorded forward alone,
the forward then backward, and the forward with torch.autograd.grad instead of .backward(); host us a call issued
while the GPU spins, 20 calls, best and median of 5."""

import time

import torch

from precision_engine.bench.linear import _specs
from precision_engine.numerics.linear import Fp8Linear

spec, numerics = _specs()["fp8_bi_wblocks"]
lin = torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
layer = Fp8Linear.from_linear(lin, spec, numerics=numerics)
x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)


def fwd(m):
    torch.autograd.graph.increment_version(m.weight)
    return m(x)


def fwd_bwd(m):
    m.weight.grad = x.grad = None
    fwd(m).backward(dy)


def fwd_grad(m):
    torch.autograd.grad(fwd(m), (x, m.weight), dy)


for name, fn in (("recorded forward", fwd), ("forward + backward", fwd_bwd), ("forward + autograd.grad", fwd_grad)):
    for label, m in (("fp8_bi_wblocks", layer), ("bf16", lin)):
        for _ in range(5):
            fn(m)
        torch.cuda.synchronize()
        runs = []
        for _ in range(5):
            torch.cuda._sleep(int(2e8))
            t0 = time.perf_counter()
            for _ in range(20):
                fn(m)
            runs.append((time.perf_counter() - t0) * 1e6 / 20)
            torch.cuda.synchronize()
        runs.sort()
        print(f"{name:26s} {label:15s} host us: min {runs[0]:8.1f} median {runs[2]:8.1f}")
