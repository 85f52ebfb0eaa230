"""Fast mode's attention launch at full size on the GPU (Llama-3.1-8B heads: 32/8, D 128; batch 64, a 512-slot
cache with ragged fills, BF16 and FP8 with per-head scales): within 4e-3 norm-relative of float64 and of the
batch-invariant launch (8e-3 for FP8 against the invariant launch, which rounds each dequantized element);
repeated launches and CUDA-graph replays give the same bytes. A few seconds on an H200.
"""

from __future__ import annotations

import pytest
import torch

from precision_engine.numerics import triton_invariant as TI
from precision_engine.numerics.kv_cache import quantize_kv

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

B, HQ, HKV, S, D = 64, 32, 8, 512, 128


def _rel(out, ref):
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("fp8", [False, True])
def test_fast_decode_attention_at_8b_shapes(fp8):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, HQ, 1, D, device="cuda", generator=g).bfloat16()
    k, v = (torch.randn(B, HKV, S, D, device="cuda", generator=g).bfloat16() for _ in range(2))
    kv_len = torch.randint(1, S + 1, (B,), device="cuda", generator=g)
    kv_len[:4] = torch.tensor([1, 128, 129, S], device="cuda")
    q_pos = (kv_len - 1)[:, None]
    kw = {"scale": D ** -0.5}
    exact = (k.double(), v.double())
    if fp8:
        scales = torch.rand(HKV, device="cuda", generator=g) * 0.01 + 0.005
        k, v = quantize_kv(k, scales), quantize_kv(v, scales)
        kw.update(k_scale=scales, v_scale=scales)
        exact = tuple(t.double() * scales.double().reshape(1, -1, 1, 1) for t in (k, v))
    filled = torch.arange(S, device="cuda")[None, None, :, None] < kv_len[:, None, None, None]
    if not fp8:  # slots past kv_len may hold anything
        k, v = (torch.where(filled, t, float("nan")) for t in (k, v))
    out = TI.attention(q, k, v, q_pos, kv_len, fast=True, **kw)
    ref = TI.attention_reference(q.double(), *exact, q_pos, kv_len, scale=D ** -0.5)
    assert torch.isfinite(out).all() and _rel(out, ref) < 4e-3
    assert _rel(out, TI.attention(q, k, v, q_pos, kv_len, **kw)) < (8e-3 if fp8 else 4e-3)
    assert torch.equal(TI.attention(q, k, v, q_pos, kv_len, fast=True, **kw), out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = TI.attention(q, k, v, q_pos, kv_len, fast=True, **kw)
    graph.replay()
    assert torch.equal(captured, out)
