"""What each piece of the batch-invariant FP8 linear's eager step costs the host (fp8_bi_wblocks, 4096x4096, 8192
tokens): microseconds to issue one call, the mean of 200 calls issued while the GPU spins (so the host never
waits for it), without cProfile. Beside them: BF16's whole step and a bare torch.empty and torch.add."""

import time

import torch

from precision_engine.bench.linear import _specs, _train_step
from precision_engine.numerics import quantize as qz
from precision_engine.numerics.capabilities import Gemm
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.linear import Fp8Linear

CALLS = 200
spec, numerics = _specs()["fp8_bi_wblocks"]
lin = torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
layer = Fp8Linear.from_linear(lin, spec, numerics=numerics)
x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
w = layer.weight.detach()
xq = qz.quantize_rows_1xG(x.detach(), spec.input)
wq, wt = qz.quantize_blocks_stacked([w], spec.weight, transposed=True)
dyq, dyt = qz.quantize_rows_and_tokens_transposed(dy, spec.grad_output, spec.wgrad_operands)
xt = qz.requantize_blocks_transposed(xq, spec.wgrad_x)
pieces = {
    "torch.empty 8192x4096 bf16": lambda: torch.empty(8192, 4096, device="cuda", dtype=torch.bfloat16),
    "torch.add (one launch)": lambda: torch.add(dy, dy),
    "quantize_rows_1xG (Triton)": lambda: qz.quantize_rows_1xG(x.detach(), spec.input),
    "quantize_blocks_stacked W, W^T (Triton)": lambda: qz.quantize_blocks_stacked([w], spec.weight, transposed=True),
    "quantize_rows_and_tokens_transposed (Gluon)":
        lambda: qz.quantize_rows_and_tokens_transposed(dy, spec.grad_output, spec.wgrad_operands),
    "requantize_blocks_transposed (Gluon)": lambda: qz.requantize_blocks_transposed(xq, spec.wgrad_x),
    "fp8_gemm fprop (AUTO: DeepGEMM)": lambda: fp8_gemm(xq, wq, kernel=spec.kernel, batch_invariant=True),
    "fp8_gemm dgrad": lambda: fp8_gemm(dyq, wt, kernel=spec.kernel, gemm=Gemm.DGRAD),
    "fp8_gemm wgrad": lambda: fp8_gemm(dyt, xt, kernel=spec.kernel, gemm=Gemm.WGRAD),
    "forward, no grad": lambda: layer(x.detach()),
    "fp8_bi_wblocks step (fwd+bwd)": lambda: _train_step(layer, x, dy),
    "bf16 step (fwd+bwd)": lambda: _train_step(lin, x, dy),
}
for fn in pieces.values():
    for _ in range(5):
        fn()
torch.cuda.synchronize()
for name, fn in pieces.items():
    best = []
    for _ in range(5):
        torch.cuda._sleep(int(2e8))  # ~100+ ms of spinning: every call below is issued before the GPU gets to it
        t0 = time.perf_counter()
        for _ in range(CALLS if "step" not in name else 20):
            fn()
        best.append((time.perf_counter() - t0) * 1e6 / (CALLS if "step" not in name else 20))
        torch.cuda.synchronize()
    best.sort()
    print(f"{name:46s} host us a call: min {best[0]:8.1f}  median {best[2]:8.1f}")
