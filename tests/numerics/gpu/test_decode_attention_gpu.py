"""Fast mode's split-KV decode attention at full size on the GPU (Llama-3.1-8B heads: 32/8, D 128; batch 64,
a 512-slot cache with ragged fills): within 4e-3 norm-relative of float64 and of the batch-invariant kernel;
an FP8 cache gives bitwise what its dequantized BF16 copy gives; repeated launches and CUDA-graph replays give
the same bytes (the arrival counters are back at zero after every launch). A few seconds on an H200.
"""

from __future__ import annotations

import pytest
import torch

from precision_engine.numerics import triton_decode_attention as DA
from precision_engine.numerics import triton_invariant as TI
from precision_engine.numerics.kv_cache import dequantize_kv, quantize_kv

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

B, HQ, HKV, S, D = 64, 32, 8, 512, 128


def _rel(out, ref):
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def _case(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, HQ, 1, D, device="cuda", generator=g).bfloat16()
    k, v = (torch.randn(B, HKV, S, D, device="cuda", generator=g).bfloat16() for _ in range(2))
    kv_len = torch.randint(1, S + 1, (B,), device="cuda", generator=g)
    kv_len[:4] = torch.tensor([1, 128, 129, S], device="cuda")
    filled = torch.arange(S, device="cuda")[None, None, :, None] < kv_len[:, None, None, None]
    k, v = (torch.where(filled, t, float("nan")) for t in (k, v))
    return q, k, v, (kv_len - 1)[:, None], kv_len


def test_decode_attention_at_8b_shapes():
    q, k, v, q_pos, kv_len = _case(0)
    out = DA.decode_attention(q, k, v, q_pos, kv_len, scale=D ** -0.5)
    ref = TI.attention_reference(q.double(), k.double(), v.double(), q_pos, kv_len, scale=D ** -0.5)
    assert torch.isfinite(out).all() and _rel(out, ref) < 4e-3
    assert _rel(out, TI.attention(q, k, v, q_pos, kv_len, scale=D ** -0.5)) < 4e-3
    assert _rel(out, DA.decode_attention_twin(q, k, v, q_pos, kv_len, scale=D ** -0.5)) < 4e-3
    assert torch.equal(DA.decode_attention(q, k, v, q_pos, kv_len, scale=D ** -0.5), out)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = DA.decode_attention(q, k, v, q_pos, kv_len, scale=D ** -0.5)
    for _ in range(3):
        graph.replay()
        assert torch.equal(captured, out)


def test_fp8_cache_equals_its_dequantized_copy():
    q, k, v, q_pos, kv_len = _case(1)
    k, v = (torch.nan_to_num(t, nan=0.0) for t in (k, v))
    scales = torch.rand(HKV, device="cuda") * 0.01 + 0.005
    kq, vq = quantize_kv(k, scales), quantize_kv(v, scales)
    fp8 = DA.decode_attention(q, kq, vq, q_pos, kv_len, scale=D ** -0.5, k_scale=scales, v_scale=scales)
    bf16 = DA.decode_attention(q, dequantize_kv(kq, scales, q.dtype), dequantize_kv(vq, scales, q.dtype), q_pos,
                               kv_len, scale=D ** -0.5)
    assert torch.equal(fp8, bf16)
