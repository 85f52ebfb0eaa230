"""Where an FP8 linear training step spends its time, GPU and host, next to BF16. Not part of the package.

1. torch.profiler: GPU time per kernel for one 4096x4096, M=8192 step of each variant.
2. Host cost per call with negligible GPU work (M=16): how much Python/launch time each piece adds.
3. cProfile of 20 FP8 steps: the Python functions that cost the host time.
"""

import cProfile
import pstats
import time

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from precision_engine.bench.linear import _specs, _train_step
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG, quantize_tokens_transposed


def layers_for(n, k):
    lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    out = {"bf16": lin}
    for name, (spec, numerics) in _specs().items():
        out[name] = Fp8Linear.from_linear(lin, spec, numerics=numerics)
    return out


def host_us(fn, calls=200):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


n, k, m = 4096, 4096, 8192
layers = layers_for(n, k)
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
for name, layer in layers.items():
    for _ in range(5):
        _train_step(layer, x, dy)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            _train_step(layer, x, dy)
        torch.cuda.synchronize()
    print(f"=== GPU kernels, {name} N={n} K={k} M={m}, 5 steps")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))

print("=== host microseconds per call, M=16 (GPU work negligible)")
act, wf = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
xs = torch.randn(16, k, device="cuda", dtype=torch.bfloat16)
xq, wq = quantize_rows_1xG(xs, act), quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), wf)
small = layers_for(n, k)
xg = torch.randn(16, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dyg = torch.randn(16, n, device="cuda", dtype=torch.bfloat16)
pieces = {
    "torch.mm bf16": lambda: torch.mm(xs, small["bf16"].weight.t()),
    "quantize_rows_1xG": lambda: quantize_rows_1xG(xs, act),
    "quantize_tokens_transposed": lambda: quantize_tokens_transposed(xs, PRESET_FORMATS["fp8_group_tokens"]),
    "fp8_gemm cublas": lambda: fp8_gemm(xq, wq, kernel=Kernel.CUBLAS, batch_invariant=False),
    "fp8_gemm triton": lambda: fp8_gemm(xq, wq, kernel=Kernel.TRITON),
    "torch._scaled_mm raw": lambda: torch._scaled_mm(xq.data, wq.data.t(), scale_a=xq.scale, scale_b=wq.scale.t(), out_dtype=torch.bfloat16),
    "nn.Linear fwd no_grad": lambda: torch.no_grad()(small["bf16"])(xs),
    "Fp8Linear(cublas) fwd no_grad": lambda: torch.no_grad()(small["fp8_cublas"])(xs),
    "nn.Linear step": lambda: _train_step(small["bf16"], xg, dyg),
    "Fp8Linear(cublas) step": lambda: _train_step(small["fp8_cublas"], xg, dyg),
}
for name, fn in pieces.items():
    print(f"{name:>32}: {host_us(fn):8.1f} us")

print("=== cProfile, 20 Fp8Linear(cublas) steps at M=8192")
layer = layers["fp8_cublas"]
prof = cProfile.Profile()
prof.enable()
for _ in range(20):
    _train_step(layer, x, dy)
torch.cuda.synchronize()
prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(25)
