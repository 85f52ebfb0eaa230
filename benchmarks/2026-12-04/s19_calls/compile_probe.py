"""Does torch.compile trace an FP8 linear's training step on the GPU without graph breaks, and give eager's bits?

On the CPU the test suite says yes (pure-torch kernels). On CUDA, AUTO launches Triton/Gluon kernels, pinned
cuBLAS (a pybind extension) and, where installed, DeepGEMM (pybind): this lists the breaks dynamo reports for one
Fp8Linear (and a fused q/k/v group) fwd+bwd at a training size and a decode-size forward, then compiles each with
fullgraph=True (inductor) and compares with eager bitwise.
"""

import sys
import traceback

import torch
from torch import nn

from precision_engine.numerics.formats import PRESET_FORMATS as P, LinearSpec
from precision_engine.numerics.fused_linear import fp8_linear_group
from precision_engine.numerics.gemm import deep_gemm_available
from precision_engine.numerics.linear import Fp8Linear

JETRL = LinearSpec(weight=P["fp8_block_weight"], input=P["fp8_group_act"], grad_output=P["fp8_group_act"],
                   wgrad_operands=P["fp8_group_tokens"])


def linear(n, k, seed=0):
    torch.manual_seed(seed)
    return Fp8Linear.from_linear(nn.Linear(k, n, bias=False, dtype=torch.bfloat16, device="cuda"), JETRL)


def explain(fn, *args):
    torch._dynamo.reset()
    try:
        e = torch._dynamo.explain(fn)(*args)
        reasons = sorted({str(r.reason).splitlines()[0][:160] for r in e.break_reasons})
        return f"graphs {e.graph_count}, breaks {e.graph_break_count}" + "".join(f"\n      - {r}" for r in reasons)
    except Exception as err:  # noqa: BLE001 (a probe: report, go on)
        return f"explain failed: {type(err).__name__}: {str(err)[:300]}"


def compare(name, fn, make_inputs, grads_of):
    if "--explain-only" in sys.argv:
        return
    torch._dynamo.reset()
    eager = grads_of(fn, make_inputs())
    try:
        compiled = grads_of(torch.compile(fn, fullgraph=True), make_inputs())
    except Exception as err:  # noqa: BLE001
        print(f"  {name}: fullgraph compile FAILED: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
        traceback.print_exc(limit=-6, file=sys.stdout)
        return
    same = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(eager, compiled))
    print(f"  {name}: fullgraph compile ok; bitwise equal to eager: {same}")


def main():
    print(f"torch {torch.__version__}, deep_gemm available: {deep_gemm_available()}")
    lin = linear(4096, 4096)
    qkv = [linear(4096, 4096, 1), linear(1024, 4096, 2), linear(1024, 4096, 3)]

    def step(x):
        return lin(x).float().square().sum()

    def group_step(x):
        return sum(y.float().square().sum() for y in fp8_linear_group(qkv, x))

    def decode(x):
        return lin(x)

    def train_inputs(m):
        torch.manual_seed(7)
        return torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16).requires_grad_()

    def train_grads(fn, x):
        lin.invalidate_weight_cache()
        for p in qkv:
            p.invalidate_weight_cache()
        fn(x).backward()
        params = [lin.weight, *(p.weight for p in qkv)]
        out = [x.grad] + [p.grad.clone() for p in params if p.grad is not None]
        for p in params:
            p.grad = None
        return out

    def decode_grads(fn, x):
        with torch.no_grad():
            return [fn(x)]

    for m in (8192, 256):
        print(f"fwd+bwd, one linear 4096x4096, M={m}: {explain(step, train_inputs(m))}")
        compare(f"fwd+bwd one linear M={m}", step, lambda m=m: train_inputs(m), train_grads)
    print(f"fwd+bwd, fused qkv, M=8192: {explain(group_step, train_inputs(8192))}")
    compare("fwd+bwd fused qkv M=8192", group_step, lambda: train_inputs(8192), train_grads)
    for m in (1, 16, 64):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            print(f"decode forward M={m}: {explain(decode, x)}")
        compare(f"decode M={m}", decode, lambda x=x: x, decode_grads)


if __name__ == "__main__":
    main()
