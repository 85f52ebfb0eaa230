"""The residual add fused into the RMSNorm after it (fused_quant.add_rms_norm) on the GPU at full size, bitwise.

The sum is torch's x + y on CUDA, the norm the batch-invariant RMSNorm kernel's (invariant.rms_norm) on that
sum, the FP8 half the 1x128 quantizer's bytes of that norm and rms_norm_quantize's (the kernel the decoder ran
before): hidden 4096 at M = 1, 64 (decode) and 8192 (prefill), a ragged hidden size, fp16, and every bf16 bit
pattern as x (subnormals, +-0, Inf, NaN). A few seconds on an H200.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from precision_engine.numerics import fused_quant as F
from precision_engine.numerics import invariant
from precision_engine.numerics import quantize as Q
from precision_engine.numerics.formats import DType, ScaleKind

from helpers import BASE, assert_bitwise

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ACT = BASE[2]  # e4m3 1x128, fp32 scales
FMTS = [None, ACT, replace(ACT, scale=ScaleKind.POW2), replace(ACT, dtype=DType.FLOAT8_E5M2)]


def _rows(shape, seed, dtype=torch.bfloat16):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, device="cuda", generator=gen)
    return (x * torch.exp(torch.randn(shape[0], 1, device="cuda", generator=gen) * 4)).to(dtype)


def _bits(t):
    return t.contiguous().view(torch.int16)


def _assert_unfused_bits(x, y, w, eps, fmt):
    s, h, q = F.add_rms_norm(x, y, w, eps, fmt)
    ref_s = x + y
    ref_h = invariant.rms_norm(ref_s, w, eps)
    assert torch.equal(torch.isnan(s), torch.isnan(ref_s)) and torch.equal(torch.isnan(h), torch.isnan(ref_h))
    keep_s, keep_h = ~torch.isnan(ref_s), ~torch.isnan(ref_h)
    assert torch.equal(_bits(s)[keep_s], _bits(ref_s)[keep_s])
    assert torch.equal(_bits(h)[keep_h], _bits(ref_h)[keep_h])
    if fmt is None:
        assert q is None
        return
    assert_bitwise(q, Q.quantize_rows_1xG(ref_h, fmt))
    assert_bitwise(q, F.rms_norm_quantize(ref_s, w, eps, fmt)[1])


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: "norm-only" if f is None else f.describe())
@pytest.mark.parametrize("shape", [(1, 4096), (64, 4096), (8192, 4096), (333, 4096 + 64)],
                         ids=["decode-1", "decode-64", "prefill-8192", "ragged"])
def test_full_size_equals_the_unfused_ops(shape, fmt):
    x, y = _rows(shape, seed=31), _rows(shape, seed=32)
    y[:, ::5] = -x[:, ::5]  # exact cancellations
    w = (1 + 0.1 * torch.randn(shape[1], device="cuda")).to(torch.bfloat16)
    _assert_unfused_bits(x, y, w, 1e-5, fmt)


@pytest.mark.parametrize("fmt", [None, ACT], ids=["norm-only", "e4m3-1x128"])
def test_fp16(fmt):
    x, y = _rows((64, 4096), seed=33, dtype=torch.float16), _rows((64, 4096), seed=34, dtype=torch.float16)
    _assert_unfused_bits(x, y, torch.ones(4096, device="cuda", dtype=torch.float16), 1e-5, fmt)


@pytest.mark.parametrize("fmt", [None, ACT], ids=["norm-only", "e4m3-1x128"])
def test_every_bf16_value_as_x(fmt):
    """All 65536 bf16 bit patterns as x (rows holding Inf or NaN norm to NaN), y of unit size."""
    x = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32, device="cuda").to(torch.int16).view(torch.bfloat16)
    x = x.reshape(16, 4096)
    y = _rows((16, 4096), seed=35).float().clamp(-4, 4).to(torch.bfloat16)
    _assert_unfused_bits(x, y, torch.ones(4096, device="cuda", dtype=torch.bfloat16), 1e-5, fmt)
