"""(The first version, without the query in backward, failed: "Failed to create tensor map descriptor: invalid
device context" on autograd's device thread.) Does a launch cost the host more inside autograd's backward (run on
its CUDA device thread) than on the main thread? Host us a call, GPU spinning: the Gluon grad-output quantizer
called directly, then inside a Function's backward, against that Function with an empty backward."""

import time

import torch

from precision_engine.bench.linear import _specs
from precision_engine.numerics import quantize as qz

spec, _ = _specs()["fp8_bi_wblocks"]
x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)


class Quantizes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, work):
        ctx.work = work
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        if ctx.work:
            torch.cuda.current_stream().query()  # a runtime call: binds the primary context to this thread
            for _ in range(5):
                qz.quantize_rows_and_tokens_transposed(g, spec.grad_output, spec.wgrad_operands)
        return g, None


def direct():
    for _ in range(5):
        qz.quantize_rows_and_tokens_transposed(dy, spec.grad_output, spec.wgrad_operands)


cases = {"direct, 5 launches": direct,
         "in backward, 5 launches": lambda: Quantizes.apply(x, True).backward(dy),
         "empty backward": lambda: Quantizes.apply(x, False).backward(dy)}
for name, fn in cases.items():
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        torch.cuda._sleep(int(2e8))
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        runs.append((time.perf_counter() - t0) * 1e6 / 20)
        torch.cuda.synchronize()
    runs.sort()
    print(f"{name:26s} host us a call: min {runs[0]:8.1f} median {runs[2]:8.1f}")
