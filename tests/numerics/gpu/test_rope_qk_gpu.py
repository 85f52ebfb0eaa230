"""RoPE of q and k in one launch (triton_invariant.rope_qk) on the GPU at Llama-3.1-8B shapes, bitwise against
the two `rope` launches and torch's ops: decode (64 tokens) and prefill (4 x 512), q and k as views of one
fused q/k/v output, bf16 and fp16, plus every bf16 bit pattern as q. A few seconds on an H200.
"""

from __future__ import annotations

import pytest
import torch

from precision_engine.numerics import invariant
from precision_engine.numerics import triton_invariant as TI

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

HQ, HK, D = 32, 8, 128


def _bits(t):
    return t.contiguous().view(torch.int16)


def _torch_rope(x, cos, sin):
    xt, half = x.transpose(1, 2), x.shape[-1] // 2
    return xt * cos[:, None] + torch.cat((-xt[..., half:], xt[..., :half]), dim=-1) * sin[:, None]


def _same(a, b):
    """Bitwise, NaN positions compared as positions."""
    nan = torch.isnan(b)
    return torch.equal(torch.isnan(a), nan) and torch.equal(_bits(a)[~nan], _bits(b)[~nan])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b,t", [(64, 1), (4, 512)], ids=["decode-64", "prefill-4x512"])
def test_full_size_equals_the_two_launches(b, t, dtype):
    g = torch.Generator(device="cuda").manual_seed(41)
    qkv = (torch.randn(b, t, (HQ + 2 * HK) * D, device="cuda", generator=g) * 3).to(dtype)
    q, k = qkv[..., : HQ * D].view(b, t, HQ, D), qkv[..., HQ * D : (HQ + HK) * D].view(b, t, HK, D)
    angle = torch.arange(t, device="cuda", dtype=torch.float32)[None, :, None] * 0.7 \
        + torch.randn(b, 1, D, device="cuda", generator=g) * 20
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    rq, rk = invariant.rope_qk(q, k, cos, sin)
    assert _same(rq, TI.rope(q, cos, sin)) and _same(rk, TI.rope(k, cos, sin))
    assert _same(rq, _torch_rope(q, cos, sin)) and _same(rk, _torch_rope(k, cos, sin))


def test_every_bf16_value_as_q():
    """All 65536 bf16 patterns as q (subnormals, +-0, Inf, NaN), k random: the separate launches' bits, and
    torch's ops' (a failure of the second alone is `_rope_kernel`'s own, not the fusion's)."""
    q = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32, device="cuda").to(torch.int16).view(torch.bfloat16)
    q = q.reshape(16, 1, HQ, D)
    k = torch.randn(16, 1, HK, D, device="cuda").to(torch.bfloat16)
    angle = torch.randn(16, 1, D, device="cuda") * 20
    cos, sin = angle.cos().to(torch.bfloat16), angle.sin().to(torch.bfloat16)
    rq, rk = TI.rope_qk(q, k, cos, sin)
    assert _same(rq, TI.rope(q, cos, sin)) and _same(rk, TI.rope(k, cos, sin))
    assert _same(rq, _torch_rope(q, cos, sin)) and _same(rk, _torch_rope(k, cos, sin)), "the rope kernel itself"
