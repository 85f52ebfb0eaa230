"""Triton quantizers vs the reference, bitwise. Without CUDA these run in Triton's CPU interpreter
(tests/conftest.py sets TRITON_INTERPRET=1 first), so shapes stay tiny."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

pytest.importorskip("triton")

from precision_engine.numerics import quantize as Q  # noqa: E402
from precision_engine.numerics.formats import FP8_MAX, Axis, DType, Granularity, QuantFormat  # noqa: E402

from helpers import BASE, FORMATS, assert_bitwise  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def both(x: torch.Tensor, fmt: QuantFormat) -> tuple[Q.Quantized, Q.Quantized]:
    return Q.quantize(x, fmt, backend="triton"), Q.quantize(x.cpu(), fmt, backend="reference")


def to_cpu(q: Q.Quantized) -> Q.Quantized:
    return replace(q, data=q.data.cpu(), scale=q.scale.cpu())


@pytest.mark.parametrize("shape", [(13, 200), (1, 128), (67, 256), (130, 64)])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.describe())
def test_matches_reference_bitwise(fmt, shape):
    gen = torch.Generator().manual_seed(hash((fmt, shape)) % 2**31)
    x = torch.randn(shape, generator=gen) * torch.exp(torch.randn(shape[0], 1, generator=gen) * 3)
    x[0, :3] = 0.0
    x[-1, -1] = -1e-42  # an fp32 subnormal
    got, ref = both(x.to(torch.bfloat16).to(DEVICE), fmt)
    assert_bitwise(to_cpu(got), ref)


@pytest.mark.parametrize("dtype", [DType.FLOAT8_E4M3, DType.FLOAT8_E5M2])
def test_rounds_every_midpoint_to_even(dtype):
    """With amax = fmax the scale is exactly 1, so the kernel's rounding itself is what is compared."""
    grid = torch.arange(256, dtype=torch.uint8).view(Q.FP8_TORCH_DTYPE[dtype]).float()
    grid = grid[torch.isfinite(grid) & (grid > 0)].unique()
    mids = (grid[1:] + grid[:-1]) / 2
    row = torch.cat([torch.tensor([FP8_MAX[dtype]]), mids, -mids, torch.nextafter(mids, grid[1:])])
    x = row[None, :].repeat(2, 1).to(DEVICE)
    fmt = QuantFormat(dtype, Granularity.CHANNEL)
    got, ref = both(x, fmt)
    assert_bitwise(to_cpu(got), ref)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
@pytest.mark.parametrize("fmt", BASE, ids=lambda f: f.describe())
def test_nonfinite_groups_match_reference(fmt, bad):
    x = torch.randn(130, 256)
    x[1, 3] = bad
    x[129, 200] = -bad
    got, ref = both(x.to(DEVICE), fmt)
    assert_bitwise(to_cpu(got), ref)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.granularity is Granularity.GROUP and f.axis is Axis.K],
                         ids=lambda f: f.describe())
@pytest.mark.parametrize("group", [128, 32], ids=["one-scale-per-token", "scale-gather"])
def test_fused_requantize_matches_reference(fmt, group):
    fmt = replace(fmt, group=group)
    x = torch.randn(67, 256, dtype=torch.bfloat16)
    saved = Q.quantize_rows_1xG(x, fmt, backend="reference")
    ref = Q.requantize_tokens_transposed(saved, backend="reference")
    on_device = replace(saved, data=saved.data.to(DEVICE), scale=saved.scale.to(DEVICE))
    got = Q.requantize_tokens_transposed(on_device, backend="triton")
    assert_bitwise(to_cpu(got), ref)


def test_empty_token_batch():
    fmt = BASE[2]
    got, ref = both(torch.randn(0, 256).to(DEVICE), fmt)
    assert got.data.shape == ref.data.shape == (0, 256) and got.scale.shape == ref.scale.shape == (0, 2)


GROUP_FORMATS = [f for f in FORMATS if f.granularity is Granularity.GROUP]


@pytest.mark.parametrize("groups", [(128, 128), (32, 64), (48, 96)], ids=["128-128", "32-64", "not-pow2"])
@pytest.mark.parametrize("shape", [(13, 200), (130, 256)])
@pytest.mark.parametrize("rows_fmt", [f for f in GROUP_FORMATS if f.axis is Axis.K][::3], ids=lambda f: f.describe())
def test_fused_grad_output_matches_both_quantizers(rows_fmt, shape, groups):
    """One kernel, two layouts: the bytes of quantize_rows_1xG and of quantize_tokens_transposed."""
    tokens_fmt = replace(rows_fmt, axis=Axis.TOKENS, group=groups[1],
                         dtype=DType.FLOAT8_E5M2 if rows_fmt.dtype is DType.FLOAT8_E4M3 else DType.FLOAT8_E4M3)
    rows_fmt = replace(rows_fmt, group=groups[0])
    gen = torch.Generator().manual_seed(hash((rows_fmt, shape, groups)) % 2**31)
    x = torch.randn(shape, generator=gen) * torch.exp(torch.randn(shape[0], 1, generator=gen) * 3)
    x[2, 5] = math.nan
    x = x.to(torch.bfloat16)
    got_r, got_t = Q.quantize_rows_and_tokens_transposed(x.to(DEVICE), rows_fmt, tokens_fmt, backend="triton")
    ref_r, ref_t = Q.quantize_rows_and_tokens_transposed(x, rows_fmt, tokens_fmt, backend="reference")
    assert_bitwise(to_cpu(got_r), Q.quantize_rows_1xG(x, rows_fmt, backend="reference"))
    assert_bitwise(to_cpu(got_t), Q.quantize_tokens_transposed(x, tokens_fmt, backend="reference"))
    assert_bitwise(ref_r, to_cpu(got_r))
    assert_bitwise(ref_t, to_cpu(got_t))


@pytest.mark.parametrize("shape", [(0, 256), (5, 0)])
def test_fused_grad_output_empty(shape):
    fmt = BASE[2]
    got_r, got_t = Q.quantize_rows_and_tokens_transposed(torch.randn(shape).to(DEVICE), fmt, BASE[3], backend="triton")
    ref_r, ref_t = Q.quantize_rows_and_tokens_transposed(torch.randn(shape), fmt, BASE[3], backend="reference")
    assert got_r.data.shape == ref_r.data.shape and got_r.scale.shape == ref_r.scale.shape
    assert got_t.data.shape == ref_t.data.shape and got_t.scale.shape == ref_t.scale.shape
