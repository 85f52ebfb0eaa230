"""Fast mode's attention launch (`triton_invariant.attention(..., fast=True)`: 16-row decode tiles; an FP8 cache
widened exactly with its scales on the scores and the output) in Triton's CPU interpreter, tiny shapes.

Kernel == torch twin (`attention_twin(..., fast=True)`) bitwise. Against float64 and the batch-invariant launch:
relative Frobenius error < 4e-3 (bf16 output; p rounded to bf16 before P @ V as in flash attention), 8e-3 for
an FP8 cache against the invariant launch (that one rounds each dequantized element to bf16, this one does not).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from precision_engine.numerics import triton_invariant as TI  # noqa: E402
from precision_engine.numerics.kv_cache import quantize_kv  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _randn(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).bfloat16().to(DEVICE)


def _rel(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    return ((out - ref).norm() / ref.norm()).item()


def _case(hq, hkv, d, lengths, *, s=320, tq=1, seed=21):
    """Queries at the last tq positions of each row's kv_len over a cache whose slots >= kv_len hold NaN."""
    b = len(lengths)
    q = _randn(b, hq, tq, d, seed=seed)
    k, v = _randn(b, hkv, s, d, seed=seed + 1), _randn(b, hkv, s, d, seed=seed + 2)
    kv_len = torch.tensor(lengths, device=DEVICE)
    k, v = (torch.where(torch.arange(s, device=DEVICE)[None, None, :, None] < kv_len[:, None, None, None], t,
                        float("nan")) for t in (k, v))
    q_pos = (kv_len[:, None] - tq + torch.arange(tq, device=DEVICE)).clamp(min=-1)
    return q, k, v, q_pos, kv_len


@pytest.mark.parametrize("hq,hkv,d,lengths,tq", [
    (8, 2, 32, [1, 130, 300, 257], 1),  # one slot; block edges +-1; a GQA group of 4 in a 16-row tile
    (4, 4, 16, [64, 128], 1),  # MHA
    (64, 2, 16, [77, 200], 1),  # a group wider than 16 rows: the 64-row tile
    (4, 2, 16, [90, 200], 7),  # a few queries per row (a chunk of prefill against the cache)
])
def test_fast_launch_matches_twin_float64_and_the_invariant_launch(hq, hkv, d, lengths, tq):
    q, k, v, q_pos, kv_len = _case(hq, hkv, d, lengths, tq=tq)
    scale = d ** -0.5
    out = TI.attention(q, k, v, q_pos, kv_len, scale=scale, fast=True)
    assert out.shape == q.shape and torch.isfinite(out).all()
    assert torch.equal(out, TI.attention_twin(q, k, v, q_pos, kv_len, scale=scale, fast=True))
    ref = TI.attention_reference(q.double(), k.double(), v.double(), q_pos, kv_len, scale=scale)
    assert _rel(out, ref) < 4e-3
    assert _rel(out, TI.attention(q, k, v, q_pos, kv_len, scale=scale)) < 4e-3


@pytest.mark.parametrize("per_head", [False, True])
def test_fast_launch_reads_an_fp8_cache(per_head):
    q, k, v, q_pos, kv_len = _case(8, 2, 32, [40, 256, 129], s=256, seed=9)
    k, v = (torch.nan_to_num(t, nan=0.0) for t in (k, v))
    scales = (torch.tensor([0.01, 0.02]) if per_head else torch.tensor(0.015)).to(DEVICE)
    kq, vq = quantize_kv(k, scales), quantize_kv(v, scales)
    kw = dict(scale=32 ** -0.5, k_scale=scales, v_scale=scales)
    out = TI.attention(q, kq, vq, q_pos, kv_len, fast=True, **kw)
    assert torch.equal(out, TI.attention_twin(q, kq, vq, q_pos, kv_len, fast=True, **kw))
    exact = (kq.double() * scales.double().reshape(1, -1, 1, 1), vq.double() * scales.double().reshape(1, -1, 1, 1))
    ref = TI.attention_reference(q.double(), *exact, q_pos, kv_len, scale=32 ** -0.5)
    assert _rel(out, ref) < 4e-3
    assert _rel(out, TI.attention(q, kq, vq, q_pos, kv_len, **kw)) < 8e-3


def test_a_query_that_sees_nothing_gives_zeros():
    q, k, v, _, kv_len = _case(4, 2, 16, [0, 200], s=256, seed=5)
    out = TI.attention(q, k, v, torch.tensor([[-1], [199]], device=DEVICE), kv_len, scale=0.25, fast=True)
    assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.isfinite(out).all()
