"""A training step of FP8 linears captured into a CUDA graph: every replay gives the eager step's bits, and
reads the weight as it is at replay time (the optimizer's writes included, which the eager cache cannot see
without invalidation), for one linear, a fused q/k/v group and torch's `make_graphed_callables`."""

import pytest
import torch
from torch import nn

from precision_engine.errors import UnsupportedError
from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.formats import Kernel, LinearSpec
from precision_engine.numerics.fused_linear import fp8_linear_group
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.policy.model import NumericsSpec
from precision_engine.rewrite import invalidate_weight_caches

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

JETRL = dict(weight=P["fp8_block_weight"], input=P["fp8_group_act"], grad_output=P["fp8_group_act"],
             wgrad_operands=P["fp8_group_tokens"])
VARIANTS = {"bi": (Kernel.AUTO, True), "bi_pinned": (Kernel.CUBLAS_PINNED, True), "cublas": (Kernel.CUBLAS, False)}


def _modules(rows, kernel, batch_invariant, seed=0):
    torch.manual_seed(seed)
    numerics = NumericsSpec(batch_invariant=batch_invariant)
    return nn.ModuleList(
        Fp8Linear.from_linear(nn.Linear(2048, n, bias=False, device="cuda", dtype=torch.bfloat16),
                              LinearSpec(**JETRL, kernel=kernel), numerics=numerics)
        for n in rows)


def _forward(modules, x):
    """The group's stacked output (one module: its own call)."""
    return fp8_linear_group(list(modules), x, stacked=True) if len(modules) > 1 else modules[0](x)


def _eager(modules, x, dy):
    """The eager step on the current weights (caches invalidated): [y, dx, dW...], no .grad touched."""
    invalidate_weight_caches(modules)
    x = x.detach().clone().requires_grad_()
    y = _forward(modules, x)
    return [y.detach(), *torch.autograd.grad(y, [x, *(m.weight for m in modules)], dy)]


def _bits_equal(got, ref):
    return all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(got, ref))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("rows", [(4096,), (4096, 1024, 1024)], ids=["single", "qkv"])
def test_replays_give_the_eager_bits_and_follow_the_optimizer(variant, rows):
    modules = _modules(rows, *VARIANTS[variant])
    x = torch.randn(3, 1000, 2048, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(3, 1000, sum(rows), device="cuda", dtype=torch.bfloat16)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and fill the caches outside the capture
        for _ in range(2):
            _forward(modules, x).backward(dy)
    torch.cuda.current_stream().wait_stream(side)
    for m in modules:
        m.weight.grad = None
    x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = _forward(modules, x)
        y.backward(dy)
    static = [y, x.grad, *(m.weight.grad for m in modules)]  # the buffers each replay writes

    for update in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert _bits_equal(static, _eager(modules, x, dy)), f"after {update} optimizer steps"
        for m in modules:  # fused AdamW writes without bumping the version: the eager cache would not see it
            m.weight.grad = torch.randn_like(m.weight) * 1e-2
        torch.optim.AdamW(modules.parameters(), lr=1e-2, fused=True).step()
        for m, grad in zip(modules, static[2:]):
            m.weight.grad = grad


def test_make_graphed_callables():
    """torch's own API for graphing a module's forward and backward, as a training loop would use it."""
    (module,) = _modules((4096,), *VARIANTS["bi"])
    x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
    graphed = torch.cuda.make_graphed_callables(module, (x,))
    for _ in range(2):
        xi = torch.randn_like(x).requires_grad_()
        module.weight.grad = None
        graphed(xi).backward(dy)
        got = [xi.grad.clone(), module.weight.grad.clone()]
        assert _bits_equal(got, _eager(nn.ModuleList([module]), xi, dy)[1:])
        with torch.no_grad():
            module.weight.data.mul_(1.5)  # a write the version counter does not see


def test_a_host_side_nonfinite_check_is_refused_under_capture():
    torch.manual_seed(0)
    module = Fp8Linear.from_linear(nn.Linear(512, 512, bias=False, device="cuda", dtype=torch.bfloat16),
                                   LinearSpec(**JETRL), numerics=NumericsSpec(nonfinite="error"))
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    module(x).sum().backward()  # eager: compiles
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(UnsupportedError, match="nonfinite: propagate"):
        with torch.cuda.graph(graph):
            module(x)
