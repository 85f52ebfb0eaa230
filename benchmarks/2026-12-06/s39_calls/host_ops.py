"""torch.profiler's CPU view of 20 eager fp8_bi_wblocks steps (4096x4096, 8192 tokens): host time by op, autograd
nodes included, to find what the step's backward spends beyond its launches."""

import torch

from precision_engine.bench.linear import _specs, _train_step
from precision_engine.numerics.linear import Fp8Linear

spec, numerics = _specs()["fp8_bi_wblocks"]
lin = torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
layer = Fp8Linear.from_linear(lin, spec, numerics=numerics)
x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    _train_step(layer, x, dy)
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    for _ in range(20):
        _train_step(layer, x, dy)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=30, max_name_column_width=60))
