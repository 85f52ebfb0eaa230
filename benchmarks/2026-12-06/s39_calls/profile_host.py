"""Where the batch-invariant FP8 linear's eager fwd+bwd spends host time, as `bench linear` steps it:
`python3 profile_host.py VARIANT NxK` (8192 tokens). Prints the host ms to issue a step with the GPU kept busy
(`timing.host_issue_ms`, BF16's beside it), the CUDA kernels a step launches, and cProfile over 50 steps by own
time and by cumulative time (the engine's, Triton's and DeepGEMM's functions)."""

import cProfile
import pstats
import sys

import torch

from precision_engine.bench.linear import _specs, _train_step
from precision_engine.bench.timing import host_issue_ms
from precision_engine.numerics.linear import Fp8Linear

variant, shape = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "4096x4096"
n, k = map(int, shape.split("x"))
lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
spec, numerics = _specs()[variant]
layer = Fp8Linear.from_linear(lin, spec, numerics=numerics)
sets = [(torch.randn(8192, k, device="cuda", dtype=torch.bfloat16, requires_grad=True),
         torch.randn(8192, n, device="cuda", dtype=torch.bfloat16)) for _ in range(2)]
for _ in range(10):
    _train_step(layer, *sets[0])
    _train_step(lin, *sets[0])
torch.cuda.synchronize()
for name, module in ((variant, layer), ("bf16", lin)):
    issue = sorted(host_issue_ms(lambda x, dy: _train_step(module, x, dy), sets) for _ in range(7))
    print(f"{name} host ms a step (7 x 10 calls): min {issue[0]:.3f} median {issue[3]:.3f}")
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    _train_step(layer, *sets[0])
    torch.cuda.synchronize()
kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
print(f"CUDA kernels a step: {len(kernels)}")
for e in kernels:
    print(f"  {e.name[:110]}")
with cProfile.Profile() as p:
    for _ in range(50):
        _train_step(layer, *sets[0])
torch.cuda.synchronize()
pstats.Stats(p).sort_stats("tottime").print_stats(30)
pstats.Stats(p).sort_stats("cumulative").print_stats("precision_engine|triton|deep_gemm", 50)
