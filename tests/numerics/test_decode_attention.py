"""Split-KV decode attention (numerics/triton_decode_attention.py) in Triton's CPU interpreter, tiny shapes.

Kernel == torch twin bitwise. Against float64 and the batch-invariant kernel: relative Frobenius error < 4e-3
(bf16 output; p is rounded to bf16 before P @ V as in flash attention). An FP8 cache gives bitwise what its
dequantized BF16 copy gives.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from precision_engine.numerics import triton_decode_attention as DA  # noqa: E402
from precision_engine.numerics import triton_invariant as TI  # noqa: E402
from precision_engine.numerics.kv_cache import dequantize_kv, quantize_kv  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _randn(*shape, seed, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(DEVICE)


def _rel(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    return ((out - ref).norm() / ref.norm()).item()


def _case(b, hq, hkv, s, d, lengths, seed):
    """One query per row at position lengths[b] - 1 over a cache whose slots >= lengths[b] hold NaN."""
    q = _randn(b, hq, 1, d, seed=seed)
    k, v = _randn(b, hkv, s, d, seed=seed + 1), _randn(b, hkv, s, d, seed=seed + 2)
    for i, n in enumerate(lengths):
        k[i, :, n:] = float("nan")
        v[i, :, n:] = float("nan")
    kv_len = torch.tensor(lengths, device=DEVICE)
    return q, k, v, (kv_len - 1)[:, None], kv_len


@pytest.mark.parametrize("hq,hkv,d,lengths", [
    (8, 2, 32, [1, 130, 300, 257]),  # one slot; a chunk edge +2; the last chunk partly filled; chunk + 1
    (4, 4, 16, [64, 128]),  # MHA; lengths on block and chunk edges
    (64, 2, 16, [77, 200]),  # a GQA group wider than 16 rows
])
def test_decode_attention_matches_float64_twin_and_the_invariant_kernel(hq, hkv, d, lengths):
    q, k, v, q_pos, kv_len = _case(len(lengths), hq, hkv, 320, d, lengths, seed=21)
    scale = d ** -0.5
    out = DA.decode_attention(q, k, v, q_pos, kv_len, scale=scale)
    ref = TI.attention_reference(q.double(), k.double(), v.double(), q_pos, kv_len, scale=scale)
    assert out.shape == q.shape and torch.isfinite(out).all()
    assert _rel(out, ref) < 4e-3
    assert torch.equal(out, DA.decode_attention_twin(q, k, v, q_pos, kv_len, scale=scale))
    assert _rel(out, TI.attention(q, k, v, q_pos, kv_len, scale=scale)) < 4e-3
    # A query at an earlier position than kv_len - 1 sees only the slots up to it (causal, as the cache allows).
    early = q_pos - 5
    assert _rel(DA.decode_attention(q, k, v, early.clamp(min=0), kv_len, scale=scale),
                TI.attention_reference(q.double(), k.double(), v.double(), early.clamp(min=0), kv_len,
                                       scale=scale)) < 4e-3


def test_a_row_that_sees_nothing_gives_zeros_and_launches_reset_their_counters():
    q, k, v, q_pos, kv_len = _case(2, 4, 2, 256, 16, [0, 200], seed=5)
    q_pos = torch.tensor([[-1], [199]], device=DEVICE)
    first = DA.decode_attention(q, k, v, q_pos, kv_len, scale=0.25)
    assert torch.equal(first[0], torch.zeros_like(first[0])) and torch.isfinite(first).all()
    assert torch.equal(DA.decode_attention(q, k, v, q_pos, kv_len, scale=0.25), first)  # counters back at 0


@pytest.mark.parametrize("per_head", [False, True])
def test_fp8_cache_equals_its_dequantized_bf16_cache(per_head):
    q, k, v, q_pos, kv_len = _case(3, 8, 2, 256, 32, [40, 256, 129], seed=9)
    k, v = (torch.where(torch.isnan(t), 0, t) for t in (k, v))
    scales = (torch.tensor([0.01, 0.02]) if per_head else torch.tensor(0.015)).to(DEVICE)
    kq, vq = quantize_kv(k, scales), quantize_kv(v, scales)
    fp8 = DA.decode_attention(q, kq, vq, q_pos, kv_len, scale=32 ** -0.5, k_scale=scales, v_scale=scales)
    bf16 = DA.decode_attention(q, dequantize_kv(kq, scales, q.dtype), dequantize_kv(vq, scales, q.dtype), q_pos,
                               kv_len, scale=32 ** -0.5)
    assert torch.equal(fp8, bf16)


def test_refuses_more_than_one_query_per_row():
    q, k, v, _, kv_len = _case(1, 4, 2, 128, 16, [100], seed=1)
    with pytest.raises(ValueError, match="one query per row"):
        DA.decode_attention(torch.cat([q, q], 2), k, v, torch.tensor([[98, 99]], device=DEVICE), kv_len,
                            scale=0.25)
