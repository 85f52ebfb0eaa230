"""FP8 linears under CUDA graph capture, with the capture flag faked on the CPU (the real graphs are in
gpu/test_graph_capture_gpu.py).

What a capture records replays without the Python that issued it, so a training forward must not take Q(W)
from the Python-side cache (it would be frozen into the graph, stale after the next optimizer step): it
quantizes the current weight and leaves the cache alone. A forward without autograd keeps reading the cache
under capture (the decode graph copies each new weight version into it), and a host-side non-finite check is
refused rather than broken.
"""

import dataclasses

import pytest
import torch
from torch import nn

from precision_engine.errors import UnsupportedError
from precision_engine.numerics import fused_linear, linear, quantize
from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.formats import Kernel, LinearSpec
from precision_engine.numerics.fused_linear import fp8_linear_group
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.policy.model import NumericsSpec

EXACT = LinearSpec(weight=P["fp8_block_weight"], input=P["fp8_group_act"], grad_output=P["fp8_group_act"],
                   wgrad_operands=P["fp8_group_tokens"], kernel=Kernel.REFERENCE)


@pytest.fixture
def capturing(monkeypatch):
    for module in (linear, fused_linear, quantize):
        monkeypatch.setattr(module, "capturing_cuda_graph", lambda: True)


def _modules(rows=(256,), seed=0, numerics=None):
    torch.manual_seed(seed)
    return [Fp8Linear.from_linear(nn.Linear(256, n, bias=False, dtype=torch.bfloat16), EXACT, numerics=numerics)
            for n in rows]


def _step(modules, x, dy):
    """(outputs, dx, dWs) of one training forward and backward, grouped where there are several modules."""
    x = x.detach().clone().requires_grad_()
    ys = fp8_linear_group(modules, x) if len(modules) > 1 else (modules[0](x),)
    sum((y.float() * d.float()).sum() for y, d in zip(ys, dy)).backward()
    out = [y.detach() for y in ys], x.grad, [m.weight.grad for m in modules]
    for m in modules:
        m.weight.grad = None
    return out


def _write_unseen(modules, seed=5):
    """A new weight written as fused AdamW writes it: no version bump, so the cache still looks current."""
    g = torch.Generator().manual_seed(seed)
    for m in modules:
        m.weight.data.copy_(torch.randn(m.weight.shape, generator=g).to(m.weight.dtype) * 0.05)


def _caches(modules):
    return [(m._w_cache, m._wt_cache, m._group_cache) for m in modules]


def _assert_same(got, ref):
    for a, b in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(ref)):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.parametrize("rows", [(256,), (256, 128, 128)], ids=["single", "qkv"])
def test_a_captured_training_step_quantizes_the_current_weight_and_leaves_the_cache(capturing, monkeypatch, rows):
    modules = _modules(rows)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 40, 256, generator=g).to(torch.bfloat16)
    dy = [torch.randn(3, 40, n, generator=g).to(torch.bfloat16) for n in rows]
    with monkeypatch.context() as eager:
        for module in (linear, fused_linear, quantize):
            eager.setattr(module, "capturing_cuda_graph", lambda: False)
        _step(modules, x, dy)  # eager: fills the caches with Q(W) of the first weights
        _write_unseen(modules)
        stale = _step(modules, x, dy)  # eager still reads them: the documented need for invalidation
    cached = _caches(modules)

    captured = _step(modules, x, dy)

    for entry, before in zip(_caches(modules), cached):
        assert all(a is b for a, b in zip(entry, before))  # nothing read from, nothing written into the cache
    reference = _modules(rows, seed=9)  # other modules over the new weights, never cached before
    for ref, m in zip(reference, modules):
        ref.weight = m.weight
    expected = _step(reference, x, dy)
    _assert_same(captured, expected)
    assert not torch.equal(captured[0][0], stale[0][0])  # the check can fail: eager read the old Q(W)


def test_a_captured_forward_without_autograd_reads_the_cache(capturing):
    """The decode graph's contract (rl.decode): it captures the cached Q(W) and refreshes it in place."""
    (module,) = _modules()
    x = torch.randn(5, 256).to(torch.bfloat16)
    with torch.no_grad():
        expected = module(x)  # under the faked capture too: no autograd, so the cache is filled and read
        cache = module._w_cache
        _write_unseen([module])
        assert torch.equal(module(x).view(torch.int16), expected.view(torch.int16))
    assert module._w_cache is cache


@pytest.mark.parametrize("mode", ["error", "warn"])
def test_a_host_side_nonfinite_check_is_refused_under_capture(capturing, mode):
    (module,) = _modules(numerics=dataclasses.replace(NumericsSpec(), nonfinite=mode))
    x = torch.randn(4, 256).to(torch.bfloat16).requires_grad_()
    with pytest.raises(UnsupportedError, match="nonfinite: propagate"):
        module(x)


def test_the_capture_query_is_not_traced_by_torch_compile(monkeypatch):
    """Under torch.compile the answer is False without asking CUDA: Dynamo cannot put the stream query (a bool)
    into a full graph, which broke `fp8_linear_group` compiled on a GPU machine (H200, 2026-12-03), where the
    CPU, whose query short-circuits on `is_available`, never saw it. Here the contract sees a CUDA whose query
    raises, so only a compiled call that does not reach it passes; eagerly it is reached."""
    import types

    from precision_engine.numerics import contract

    def query():
        raise AssertionError("queried the stream")

    cuda = types.SimpleNamespace(is_available=lambda: True, is_current_stream_capturing=query)
    monkeypatch.setattr(contract, "torch", types.SimpleNamespace(cuda=cuda, compiler=torch.compiler))
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: t + 1 if contract.capturing_cuda_graph() else t - 1, backend="eager",
                             fullgraph=True)
    assert torch.equal(compiled(torch.zeros(2)), torch.full((2,), -1.0))
    with pytest.raises(AssertionError, match="queried the stream"):
        contract.capturing_cuda_graph()
