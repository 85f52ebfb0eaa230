"""GPU time per kernel of one FP8 linear training step (fwd+bwd, W re-quantized as after an optimizer step):
ours (cuBLAS and batch-invariant) beside torchao's Float8BlockwiseLinear and BF16, one shape, same process.
Usage: python profile_step.py N K M [variants]"""
import sys
from collections import defaultdict

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from precision_engine.bench import torchao_ref
from precision_engine.bench.linear import _specs, _train_step
from precision_engine.numerics.linear import Fp8Linear

n, k, m = (int(a) for a in sys.argv[1:4])
variants = sys.argv[4].split(",") if len(sys.argv) > 4 else ["bf16", "fp8_cublas", "fp8_bi", "torchao"]
lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
layers = {"bf16": lin}
for name, (spec, numerics) in _specs().items():
    layers[name] = Fp8Linear.from_linear(lin, spec, numerics=numerics)
if "torchao" in variants:
    layers["torchao"] = torchao_ref.blockwise_linear(lin)
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
steps = 10
for name in variants:
    layer = layers[name]
    for _ in range(3):
        _train_step(layer, x, dy)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            _train_step(layer, x, dy)
        torch.cuda.synchronize()
    per = defaultdict(float)
    for e in prof.key_averages():
        if e.device_time_total > 0:
            per[e.key] += e.device_time_total / steps / 1000
    total = sum(per.values())
    print(f"== {name} {n}x{k} M={m}: GPU {total:.3f} ms per step")
    for key, ms in sorted(per.items(), key=lambda kv: -kv[1])[:12]:
        print(f"   {ms:8.4f}  {key[:110]}")
