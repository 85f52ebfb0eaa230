"""Host (Python + torch-op) cost of the FP8 linear's training step on the CPU with every launch stubbed: the
Triton quantizers and the explicit Triton GEMM for all three GEMMs, under the interpreter; kernels never run."""
import os, sys, time, statistics, cProfile, pstats
os.environ["TRITON_INTERPRET"] = "1"
import torch
from triton.runtime.interpreter import InterpretedFunction
import precision_engine.numerics.quantize as Q
from precision_engine.numerics.formats import PRESET_FORMATS as P, Kernel, LinearSpec
from precision_engine.policy.model import NumericsSpec
from precision_engine.numerics.linear import Fp8Linear
launches = [0]
def stub(self, *a, **k):
    launches[0] += 1
InterpretedFunction.run = stub
Q._use_triton = lambda x, backend: True
spec = LinearSpec(weight=P["fp8_block_weight"], input=P["fp8_group_act"], grad_output=P["fp8_group_act"],
                  wgrad_operands=P["fp8_group_tokens"], kernel=Kernel.TRITON)
lin = torch.nn.Linear(512, 512, bias=False, dtype=torch.bfloat16)
layer = Fp8Linear.from_linear(lin, spec, numerics=NumericsSpec(batch_invariant=True))
x = torch.randn(256, 512, dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(256, 512, dtype=torch.bfloat16)
def step():
    layer.weight.grad = None; x.grad = None
    torch.autograd.graph.increment_version(layer.weight)
    layer(x).backward(dy)
def bf16_step():
    lin.weight.grad = None; x.grad = None
    lin(x).backward(dy)
for _ in range(20): step(); bf16_step()
for name, fn in (("bf16", bf16_step), ("fp8", step)):
    launches[0] = 0
    ts = []
    for _ in range(300):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    print(f"{name} step host {statistics.median(ts)*1e6:.0f} us median, {launches[0]/300:.1f} launches/step")
if len(sys.argv) > 1:
    pr = cProfile.Profile(); pr.enable()
    for _ in range(300): step()
    pr.disable(); pstats.Stats(pr).sort_stats(sys.argv[1]).print_stats(int(sys.argv[2]) if len(sys.argv) > 2 else 40)
