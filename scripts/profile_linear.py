"""Kernel-by-kernel GPU time of one FP8 linear training step vs BF16 (torch.profiler), to find where the FP8
linear loses to the GEMM-only ceiling. Prints the top kernels per variant. Not part of the package."""

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from precision_engine.bench.linear import _specs, _train_step
from precision_engine.numerics.linear import Fp8Linear

for n, k in [(4096, 4096), (14336, 4096)]:
    m = 8192
    lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    layers = {"bf16": lin}
    for name, (spec, numerics) in _specs().items():
        layers[name] = Fp8Linear.from_linear(lin, spec, numerics=numerics)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    for name, layer in layers.items():
        for _ in range(5):
            _train_step(layer, x, dy)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                _train_step(layer, x, dy)
            torch.cuda.synchronize()
        print(f"=== {name} N={n} K={k} M={m} (5 steps)")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=70))
