"""The attention kernel's epilogue quantization for o_proj (`triton_invariant.attention(..., quantize=fmt)`) on the
GPU at Llama-3.1-8B shapes (32/8 heads, D 128; batch 64 against a 512-slot cache with ragged fills, BF16 and FP8
with per-head scales), bitwise: the output equals the launch without quantization, the FP8 half equals the 1x128
Triton quantizer's bytes and scales of that output as o_proj reads it ([B * Tq, Hq * D], the kernel the decoder
launched before) and the torch reference's; for the batch-invariant and the fast launch, a decode step, a prefill
chunk of 16 queries with padding queries, and the full forward (Tq = S); CUDA-graph replays give the same bytes.
A few seconds on an H200.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from precision_engine.numerics import quantize as Q
from precision_engine.numerics import triton_invariant as TI
from precision_engine.numerics.formats import DType, ScaleKind
from precision_engine.numerics.kv_cache import quantize_kv

from helpers import BASE, assert_bitwise

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

B, HQ, HKV, S, D = 64, 32, 8, 512, 128
ACT = BASE[2]  # e4m3 1x128, fp32 scales
FMTS = [ACT, replace(ACT, scale=ScaleKind.POW2), replace(ACT, dtype=DType.FLOAT8_E5M2)]


def _case(b, tq, fp8, seed):
    """q at the last tq positions of each row's kv_len; positions below 0 are padding queries."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, HQ, tq, D, device="cuda", generator=g).bfloat16()
    k = torch.randn(b, HKV, S, D, device="cuda", generator=g).bfloat16()
    v = torch.randn(b, HKV, S, D, device="cuda", generator=g)
    v = (v * torch.exp(torch.randn(b, HKV, S, 1, device="cuda", generator=g) * 2)).bfloat16()
    kv_len = torch.randint(1, S + 1, (b,), device="cuda", generator=g)
    kv_len[: min(b, 4)] = torch.tensor([0, 7, 129, S], device="cuda")[: min(b, 4)]
    q_pos = (kv_len[:, None] - tq + torch.arange(tq, device="cuda")).clamp(min=-1)
    kw = {"scale": D ** -0.5}
    if fp8:
        scales = (k.float().abs().amax(dim=(0, 2, 3)) / 448, v.float().abs().amax(dim=(0, 2, 3)) / 448)
        k, v = quantize_kv(k, scales[0]), quantize_kv(v, scales[1])
        kw.update(k_scale=scales[0], v_scale=scales[1])
    else:  # slots past kv_len may hold anything
        filled = torch.arange(S, device="cuda")[None, None, :, None] < kv_len[:, None, None, None]
        k, v = (torch.where(filled, t, float("nan")) for t in (k, v))
    return (q, k, v, q_pos, kv_len), kw


def _o_proj_input(out):
    b, hq, tq, d = out.shape
    return out.transpose(1, 2).reshape(b * tq, hq * d)


def _assert_handover(args, kw, fmt, fast):
    plain = TI.attention(*args, fast=fast, **kw)
    out, xq = TI.attention(*args, fast=fast, quantize=fmt, **kw)
    assert torch.isfinite(out).all() and torch.equal(out.view(torch.int16), plain.view(torch.int16))
    assert_bitwise(xq, Q.quantize_rows_1xG(_o_proj_input(out), fmt, backend="triton"))
    assert_bitwise(xq, Q.quantize_rows_1xG(_o_proj_input(out), fmt, backend="reference"))
    return out, xq


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.describe())
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16-cache", "fp8-cache"])
@pytest.mark.parametrize("fast", [False, True], ids=["invariant", "fast"])
def test_decode_step_at_8b_shapes(fast, fp8, fmt):
    args, kw = _case(B, 1, fp8, seed=1)
    out, xq = _assert_handover(args, kw, fmt, fast)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured, captured_q = TI.attention(*args, fast=fast, quantize=fmt, **kw)
    graph.replay()
    assert torch.equal(captured.view(torch.int16), out.view(torch.int16))
    assert_bitwise(captured_q, xq)


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16-cache", "fp8-cache"])
@pytest.mark.parametrize("fast", [False, True], ids=["invariant", "fast"])
def test_prefill_chunk_with_padding_queries(fast, fp8):
    args, kw = _case(B, 16, fp8, seed=2)
    assert (args[3] < 0).any()
    _assert_handover(args, kw, ACT, fast)


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16-cache", "fp8-cache"])
def test_full_forward(fp8):
    """Tq = S (the trainer's shape, 4 rows): the batch-invariant launch."""
    args, kw = _case(4, S, fp8, seed=3)
    _assert_handover(args, kw, ACT, False)
