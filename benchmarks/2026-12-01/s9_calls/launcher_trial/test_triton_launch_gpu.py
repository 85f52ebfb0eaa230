"""Direct launches on the GPU: the kernel a hit runs is the one Triton picks for those arguments, and every
output is byte for byte that of Triton's own launches. The kernels cover every argument kind we pass: tensors,
ints of each specialization (1, multiples of 16, others), floats, constexprs, options and TMA descriptors."""

from __future__ import annotations

import pytest
import torch

from precision_engine.numerics import triton_launch as L
from precision_engine.numerics.formats import PRESET_FORMATS as P

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _record(monkeypatch) -> list:
    """Each launch as (kernel, grid, args, kwargs, the compiled kernel it ran directly or None)."""
    seen, real = [], L.launch

    def spy(kernel, grid, *args, **kwargs):
        _, compiled, _ = L.lookup(kernel, args, kwargs)
        real(kernel, grid, *args, **kwargs)
        seen.append((kernel, grid, args, kwargs, compiled))

    for module in ("triton_quant", "gluon_gemm", "triton_sampling", "triton_gemm"):
        monkeypatch.setattr(f"precision_engine.numerics.{module}.launch", spy)
    return seen


def _outputs(seed: int) -> list[torch.Tensor]:
    from precision_engine.numerics import triton_quant as TQ
    from precision_engine.numerics.gemm import fp8_gemm
    from precision_engine.numerics.triton_sampling import log_softmax

    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(300, 4096, device="cuda", generator=gen).to(torch.bfloat16)
    w = torch.randn(640, 4096, device="cuda", generator=gen).to(torch.bfloat16)
    xq, wq = TQ.quantize_rows(x, P["fp8_group_act"]), TQ.quantize_blocks(w, P["fp8_block_weight"])
    xt = TQ.quantize_tokens_transposed(x[1:], P["fp8_group_tokens"])  # odd M: padded tokens
    y = fp8_gemm(xq, wq, batch_invariant=True)  # Gluon on Hopper: TMA descriptors
    y1 = fp8_gemm(type(xq)(xq.data[:1], xq.scale[:1], xq.fmt), wq, batch_invariant=True)  # M = 1
    logits = torch.randn(5, 1000, device="cuda", generator=gen)
    out = [xq.data, xq.scale, wq.data, wq.scale, xt.data, xt.scale, y, y1, log_softmax(logits, 0.7)]
    return [t.view(torch.uint8) if t.element_size() == 1 else t for t in out]


@pytest.mark.skipif(not L.direct_launches(), reason="direct launches run on Triton 3.6 only")
def test_direct_launch_runs_tritons_kernel_with_tritons_bytes(monkeypatch):
    seen = _record(monkeypatch)
    _outputs(0)  # fills the caches through Triton's path
    start = len(seen)
    direct = _outputs(1)
    hits = [call for call in seen[start:] if call[4] is not None]
    assert len(hits) == len(seen) - start, "every launch of the second pass should run directly"
    monkeypatch.setattr(L, "direct_launches", lambda: False)
    reference = _outputs(1)  # Triton's own launch of every kernel
    for got, want in zip(direct, reference, strict=True):
        assert torch.equal(got, want)
    for kernel, grid, args, kwargs, compiled in hits:
        assert kernel.run(*args, grid=grid, warmup=True, **kwargs) is compiled  # the kernel Triton picks
