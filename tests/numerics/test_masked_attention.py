"""`masked_attention.causal_sdpa` against `masked_sdpa` and a float64 reference, on the CPU: a right-padded GQA
batch (a teacher-forcing forward's shape), fp32 (kv heads repeated) and bf16 (enable_gqa). On every query that
sits at its position below kv_len, output and gradients within 1e-5 (fp32) / 2e-2 (bf16) norm-relative of
float64 autograd through `triton_attention.attention_reference`; padding queries finite. Fresh Gaussians."""

from __future__ import annotations

import pytest
import torch

from precision_engine.numerics.masked_attention import causal_sdpa, masked_sdpa, visible_slots

pytest.importorskip("triton")

from precision_engine.numerics.triton_attention import attention_reference  # noqa: E402

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def _rel(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_equals_masked_on_real_queries(dtype):
    g = torch.Generator().manual_seed(7)
    b, hq, hkv, t, d = 3, 8, 2, 37, 32
    q, k, v = (torch.randn(b, h, t, d, generator=g).to(dtype).requires_grad_() for h in (hq, hkv, hkv))
    lengths = torch.tensor([37, 20, 1])
    cols = torch.arange(t)
    real = cols < lengths[:, None]
    q_pos = torch.where(real, cols, -1)
    scale = d ** -0.5
    gy = torch.randn(b, hq, t, d, generator=g).to(dtype) * real[:, None, :, None]  # the loss reads real queries

    out = causal_sdpa(q, k, v, scale=scale)
    masked = masked_sdpa(q, k, v, visible_slots(q_pos, lengths, t), scale=scale)
    assert out.dtype == dtype and torch.isfinite(out).all()
    got = torch.autograd.grad(out, (q, k, v), gy)
    want_masked = torch.autograd.grad(masked, (q, k, v), gy)

    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = attention_reference(qd, kd, vd, q_pos, lengths, scale=scale)
    want = torch.autograd.grad(ref, (qd, kd, vd), gy.double())
    sel = real[:, None, :, None].expand_as(ref)
    assert _rel(out[sel], ref[sel]) < TOL[dtype]
    assert _rel(masked[sel], ref[sel]) < TOL[dtype]
    for ours, theirs, exact in zip(got, want_masked, want):
        assert torch.isfinite(ours).all()
        assert _rel(ours, exact) < TOL[dtype] and _rel(theirs, exact) < TOL[dtype]
