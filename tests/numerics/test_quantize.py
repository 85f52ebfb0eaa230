"""The reference quantizers against the contract in numerics/quantize.py, checked independently in float64."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from precision_engine.errors import NonFiniteError
from precision_engine.numerics import quantize as Q
from precision_engine.numerics.formats import AMAX_EPS, FP8_MAX, Axis, DType, Granularity, QuantFormat, ScaleKind

from helpers import sqnr_db

E4M3, E5M2 = DType.FLOAT8_E4M3, DType.FLOAT8_E5M2
ROWS = QuantFormat(E4M3, Granularity.GROUP, group=128, axis=Axis.K)
TOKENS = QuantFormat(E4M3, Granularity.GROUP, group=128, axis=Axis.TOKENS)
BLOCKS = QuantFormat(E4M3, Granularity.BLOCK, block=(128, 128))
TENSOR = QuantFormat(E4M3, Granularity.TENSOR)
CHANNEL = QuantFormat(E4M3, Granularity.CHANNEL)
ALL = [TENSOR, CHANNEL, ROWS, TOKENS, BLOCKS]
# SQNR floors vs float64 on Gaussian data (measured ~31.5 dB e4m3, ~25.5 dB e5m2 for every granularity).
SQNR_FLOOR_DB = {E4M3: 30.0, E5M2: 24.0}
# Largest |dequant - x|: half an FP8 ulp relative (3 / 2 mantissa bits) or half the subnormal quantum * scale.
REL_HALF_ULP = {E4M3: 2.0**-4, E5M2: 2.0**-3}
SUBNORMAL_HALF_QUANTUM = {E4M3: 2.0**-10, E5M2: 2.0**-17}


def variants(fmt):
    return [replace(fmt, dtype=d, scale=s) for d in (E4M3, E5M2) for s in (ScaleKind.FP32, ScaleKind.POW2)]


def ids(fmt):
    return fmt.describe()


def logical(q: Q.Quantized) -> torch.Tensor:
    """Dequantized values in the input's [M, K] orientation."""
    d = Q.dequantize(q, torch.float64)
    return d.t() if q.fmt.granularity is Granularity.GROUP and q.fmt.axis is Axis.TOKENS else d


def fp8_values(dtype: DType) -> torch.Tensor:
    v = torch.arange(256, dtype=torch.uint8).view(Q.FP8_TORCH_DTYPE[dtype]).double()
    return v[torch.isfinite(v)].unique()


@pytest.mark.parametrize("fmt", [f for base in ALL for f in variants(base)], ids=ids)
def test_sqnr_floor_gaussian(fmt):
    x = torch.randn(96, 384, dtype=torch.float64)
    approx = logical(Q.quantize(x.float(), fmt, backend="reference"))
    assert sqnr_db(x, approx) >= SQNR_FLOOR_DB[fmt.dtype]


def test_fine_granularity_survives_outlier_rows():
    x = torch.randn(64, 256, dtype=torch.float64)
    x[3] *= 1e4
    group_db = sqnr_db(x[4:], logical(Q.quantize(x.float(), ROWS))[4:])
    tensor_db = sqnr_db(x[4:], logical(Q.quantize(x.float(), TENSOR))[4:])
    assert group_db >= SQNR_FLOOR_DB[E4M3] > tensor_db


@pytest.mark.parametrize("fmt", variants(ROWS), ids=ids)
def test_scale_and_rounding_follow_the_contract_exactly(fmt):
    """Scale = max(amax, eps)/fmax (pow2: rounded up), q = nearest-even FP8 to x/scale, checked in float64."""
    x = (torch.randn(13, 256) * torch.exp(torch.randn(13, 1) * 4)).to(torch.bfloat16)
    q = Q.quantize(x, fmt)
    fmax = FP8_MAX[fmt.dtype]
    amax = x.double().abs().view(13, 2, 128).amax(-1)
    expected = (amax / fmax).float()  # the fp32 quotient, rounded once
    if fmt.scale is ScaleKind.POW2:
        expected = torch.exp2(torch.ceil(torch.log2(amax / fmax))).float()
    assert torch.equal(q.scale, expected)
    quotient = (x.float().view(13, 2, 128) / q.scale[:, :, None]).double().clamp(-fmax, fmax)
    grid = fp8_values(fmt.dtype)
    idx = torch.searchsorted(grid, quotient.flatten()).clamp(1, len(grid) - 1)
    lo, hi = grid[idx - 1], grid[idx]
    d_lo, d_hi = quotient.flatten() - lo, hi - quotient.flatten()
    got = q.data.double().flatten()
    nearest = torch.where(d_lo < d_hi, lo, hi)
    ties = d_lo == d_hi
    assert torch.equal(got[~ties], nearest[~ties])
    tie_bits = got[ties].to(Q.FP8_TORCH_DTYPE[fmt.dtype]).view(torch.uint8)
    assert torch.all(tie_bits & 1 == 0)


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_midpoints_round_to_even_and_amax_hits_fmax(dtype):
    grid = fp8_values(dtype)
    grid = grid[grid > 0]
    mids = ((grid[1:] + grid[:-1]) / 2).float()
    fmax = FP8_MAX[dtype]
    x = torch.cat([torch.tensor([fmax]), mids, -mids])[None, :]  # amax = fmax -> scale exactly 1
    q = Q.quantize(x, QuantFormat(dtype, Granularity.CHANNEL))
    assert q.scale.item() == 1.0
    got = q.data.double()[0, 1:].abs()
    neighbours = torch.stack([grid[:-1], grid[1:]]).repeat(1, 2)
    assert torch.all((got == neighbours[0]) | (got == neighbours[1]))  # one of the two neighbours...
    assert torch.all(q.data.view(torch.uint8)[0, 1:] & 1 == 0)  # ...the one with an even mantissa
    assert q.data.float()[0, 0].item() == fmax


def test_group_amax_element_maps_to_fmax():
    x = torch.randn(7, 384)
    q = Q.quantize(x, ROWS)
    at = x.view(7, 3, 128).abs().argmax(-1)
    picked = q.data.float().view(7, 3, 128).gather(2, at[:, :, None]).abs()
    assert torch.all(picked == 448.0)


@pytest.mark.parametrize("fmt", [f for base in ALL for f in variants(base)], ids=ids)
def test_zero_groups_give_finite_scale_and_zero_data(fmt):
    x = torch.zeros(5, 256)
    q = Q.quantize(x, fmt)
    assert torch.all(torch.isfinite(q.scale))
    assert torch.all(q.data.view(torch.uint8) == 0)
    eps_scale = torch.tensor(AMAX_EPS, dtype=torch.float32) / FP8_MAX[fmt.dtype]
    if fmt.scale is ScaleKind.FP32:
        assert torch.all(q.scale == eps_scale)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("fmt", ALL, ids=ids)
def test_nonfinite_group_becomes_nan_and_others_are_untouched(fmt, bad):
    x = torch.randn(130, 256)
    clean = Q.quantize(x, fmt)
    x[1, 3] = bad
    q = Q.quantize(x, fmt)
    nan_values = torch.isnan(logical(q))
    assert nan_values[1, 3]
    expected_nan = {
        Granularity.TENSOR: torch.ones(130, 256, dtype=torch.bool),
        Granularity.CHANNEL: torch.zeros(130, 256, dtype=torch.bool).index_fill_(0, torch.tensor([1]), True),
    }.get(fmt.granularity)
    if expected_nan is None:  # group / block: exactly the 128-wide group or block holding the element
        expected_nan = torch.zeros(130, 256, dtype=torch.bool)
        if fmt.granularity is Granularity.BLOCK:
            expected_nan[:128, :128] = True
        elif fmt.axis is Axis.K:
            expected_nan[1, :128] = True
        else:
            expected_nan[:128, 3] = True
    assert torch.equal(nan_values, expected_nan)
    assert torch.equal(logical(q)[~expected_nan], logical(clean)[~expected_nan])


def test_denormal_inputs_quantize_without_nan():
    tiny = torch.tensor([1e-39, -3e-40, 9.2e-41], dtype=torch.bfloat16)  # bf16 / fp32 subnormals
    x = tiny.repeat(4, 128)[:, :256]
    q = Q.quantize(x, ROWS)
    assert torch.all(torch.isfinite(q.scale)) and not torch.any(torch.isnan(q.data.float()))
    # Values smaller than eps quantize to signed zero.
    assert torch.equal(torch.signbit(q.data.float()), torch.signbit(x.float()))


def test_fp8_subnormal_outputs_are_exact():
    x = torch.tensor([[448.0, 2.0**-9, 3 * 2.0**-9, -(2.0**-8), 2.0**-10, 1.5 * 2.0**-10]])
    q = Q.quantize(x, QuantFormat(E4M3, Granularity.CHANNEL))
    assert q.data.float().tolist() == [[448.0, 2.0**-9, 3 * 2.0**-9, -(2.0**-8), 0.0, 2.0**-9]]


@pytest.mark.parametrize("fmt", [f for f in variants(ROWS) if f.scale is ScaleKind.POW2], ids=ids)
def test_pow2_scales_are_powers_of_two_and_never_saturate(fmt):
    x = torch.randn(33, 384) * torch.exp(torch.randn(33, 1) * 5)
    q = Q.quantize(x, fmt)
    mantissa, _ = torch.frexp(q.scale)
    assert torch.all(mantissa == 0.5)
    assert torch.all(x.view(33, 3, 128).abs() / q.scale[:, :, None] <= FP8_MAX[fmt.dtype])


def test_layouts_and_shapes():
    x = torch.randn(2, 3, 300)  # leading dims flatten to 6 tokens
    rows = Q.quantize_rows_1xG(x, ROWS)
    assert rows.data.shape == (6, 300) and rows.scale.shape == (6, 3) and rows.scale.stride() == (1, 6)
    toks = Q.quantize_tokens_transposed(x, TOKENS)
    assert toks.data.shape == (300, 128) and toks.data.is_contiguous() and toks.tokens == 6
    assert toks.scale.shape == (300, 1) and toks.scale.stride() == (1, 300)
    assert torch.all(toks.data[:, 6:].view(torch.uint8) == 0)  # zero token padding
    assert Q.dequantize(toks).shape == (300, 6)
    w = Q.quantize_blocks(torch.randn(300, 260), BLOCKS)
    assert w.scale.shape == (3, 3) and w.scale.is_contiguous()
    assert Q.quantize(torch.randn(4, 5), TENSOR).scale.shape == ()
    assert Q.quantize(torch.randn(4, 5), CHANNEL).scale.shape == (4, 1)
    assert Q.dequantize(rows, torch.bfloat16).dtype == torch.bfloat16


def test_requantize_equals_quantize_of_dequantized():
    x = torch.randn(200, 256, dtype=torch.bfloat16)
    saved = Q.quantize_rows_1xG(x, ROWS)
    direct = Q.quantize_tokens_transposed(Q.dequantize(saved), TOKENS)
    fused = Q.requantize_tokens_transposed(saved)
    assert torch.equal(fused.data.view(torch.uint8), direct.data.view(torch.uint8))
    assert torch.equal(fused.scale, direct.scale) and fused.fmt == TOKENS


def test_requantize_to_blocks_is_x_transposed_in_blocks_checked_in_float64():
    """x^T in 128x128 blocks from the saved 1x128 activation: token columns padded with zeros to whole blocks,
    one scale a block (amax / 448 of the dequantized x, in float64), every element within half an FP8 ulp."""
    x = torch.randn(200, 256, dtype=torch.bfloat16) * torch.logspace(-2, 1, 256)  # channels over three decades
    saved = Q.quantize_rows_1xG(x, ROWS)
    out = Q.requantize_blocks_transposed(saved, BLOCKS)
    assert out.data.shape == (256, 256) and out.scale.shape == (2, 2) and out.fmt == BLOCKS
    xt = torch.zeros(256, 256, dtype=torch.float64)
    xt[:, :200] = Q.dequantize(saved).double().t()
    amax = xt.view(2, 128, 2, 128).abs().amax(dim=(1, 3))
    assert torch.allclose(out.scale.double(), amax / FP8_MAX[E4M3], rtol=2**-23)
    back = Q.dequantize(out).double()
    assert torch.equal(back[:, 200:], torch.zeros(256, 56, dtype=torch.float64))
    bound = torch.maximum(xt.abs() * REL_HALF_ULP[E4M3], out.scale.double().repeat_interleave(128, 0)
                          .repeat_interleave(128, 1) * 2.0**-10)
    assert ((back - xt).abs() <= bound).all()
    with pytest.raises(ValueError, match="1xG"):
        Q.requantize_blocks_transposed(out, BLOCKS)
    with pytest.raises(ValueError):
        Q.requantize_blocks_transposed(saved, TOKENS)


def test_bad_requests_are_refused():
    with pytest.raises(ValueError, match="not an FP8 format"):
        Q.quantize(torch.randn(2, 2), QuantFormat(DType.BF16))
    with pytest.raises(ValueError, match="axis=k"):
        Q.quantize_rows_1xG(torch.randn(2, 2), TOKENS)
    with pytest.raises(ValueError, match="backend"):
        Q.quantize(torch.randn(2, 2), ROWS, backend="cuda")
    with pytest.raises(ValueError, match="2-D"):
        Q.quantize_blocks(torch.randn(2, 2, 2), BLOCKS)


def test_check_finite_modes():
    good = Q.quantize(torch.randn(4, 128), ROWS)
    x = torch.randn(4, 128)
    x[2, 2] = math.nan
    bad = Q.quantize(x, ROWS)
    Q.check_finite(good, "error", "x")
    Q.check_finite(bad, "propagate", "x")
    with pytest.raises(NonFiniteError, match="x: 1 of 4 scale groups"):
        Q.check_finite(bad, "error", "x")
    with pytest.warns(RuntimeWarning, match="dy: 1 of 512 elements"):
        Q.check_finite(x, "warn", "dy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Q.check_finite(good, "warn", "x")


MAGNITUDE = st.floats(min_value=-30, max_value=30)


@settings(max_examples=25, deadline=None)
@given(
    m=st.sampled_from([1, 13, 67]),
    k=st.sampled_from([64, 128, 200, 256, 384]),
    log10_scale=MAGNITUDE,
    fmt=st.sampled_from([f for base in ALL for f in variants(base)]),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_error_bound_any_shape_and_magnitude(m, k, log10_scale, fmt, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen) * 10.0**log10_scale
    q = Q.quantize(x, fmt)
    assert torch.all(torch.isfinite(q.scale)) and torch.all(q.scale > 0)
    approx = logical(q)
    err = (approx - x.double()).abs()
    scale_at = logical(replace(q, data=torch.ones_like(q.data, dtype=torch.float32).to(q.data.dtype)))
    bound = REL_HALF_ULP[fmt.dtype] * x.double().abs() * (1 + 1e-6) + SUBNORMAL_HALF_QUANTUM[fmt.dtype] * scale_at
    assert torch.all(err <= bound)


@pytest.mark.parametrize("rows", [(384,), (100,), (256, 128, 128), (256, 128, 100)])
def test_quantize_blocks_stacked_gives_the_stack_and_its_transpose_bitwise(rows):
    """A fused GEMM's parts quantized into one buffer pair: the bits of quantizing their stack, and of
    transposing that (the last part may end in a partial block)."""
    from precision_engine.numerics.gemm import transpose_operand

    from precision_engine.numerics.formats import PRESET_FORMATS

    fmt = PRESET_FORMATS["fp8_block_weight"]
    torch.manual_seed(len(rows))
    weights = [torch.randn(r, 200, dtype=torch.bfloat16) * (i + 1) for i, r in enumerate(rows)]
    wq, wt = Q.quantize_blocks_stacked(weights, fmt, transposed=True)
    ref = Q.quantize_blocks(torch.cat(weights), fmt)
    ref_t = transpose_operand(ref)
    for got, want in ((wq, ref), (wt, ref_t)):
        assert torch.equal(got.data.view(torch.uint8), want.data.view(torch.uint8))
        assert torch.equal(got.scale, want.scale)
    only, none = Q.quantize_blocks_stacked(weights, fmt, transposed=False)
    assert none is None and torch.equal(only.data.view(torch.uint8), ref.data.view(torch.uint8))


def test_quantize_blocks_stacked_refuses_parts_it_cannot_stack():
    from precision_engine.errors import OperandError
    from precision_engine.numerics.formats import PRESET_FORMATS

    fmt = PRESET_FORMATS["fp8_block_weight"]
    for weights, match in (([torch.randn(100, 128), torch.randn(128, 128)], "whole 128-row blocks"),
                           ([torch.randn(128, 128), torch.randn(128, 64)], "one width"),
                           ([], "one width"), ([torch.randn(128)], "2-D")):
        with pytest.raises(OperandError, match=match):
            Q.quantize_blocks_stacked(weights, fmt, transposed=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.float8_e4m3fn])
def test_quantize_refuses_inputs_outside_the_contract(dtype):
    """Step 1 (x.float()) is exact for bf16/fp16/fp32 only: float64 would round silently (1e300 -> Inf -> NaN)."""
    from precision_engine.errors import OperandError
    from precision_engine.numerics.formats import PRESET_FORMATS

    x = torch.randn(4, 128).to(dtype)
    for call in (lambda: Q.quantize(x, PRESET_FORMATS["fp8_group_act"]),
                 lambda: Q.quantize_blocks(x, PRESET_FORMATS["fp8_block_weight"])):
        with pytest.raises(OperandError, match="bf16/fp16/fp32 tensor, got"):
            call()


def test_quantized_bytes_hold_no_autograd_graph():
    """A Parameter quantized through the public API: no grad_fn, so no graph keeps the weight's saved tensors."""
    from precision_engine.numerics.formats import PRESET_FORMATS

    w = torch.nn.Parameter(torch.randn(256, 256))
    outputs = [Q.quantize(w, PRESET_FORMATS[name]) for name in ("fp8_group_act", "fp8_block_weight", "fp8_tensor",
                                                                  "fp8_channel", "fp8_group_tokens")]
    outputs.append(Q.quantize_rows_and_tokens_transposed(w, PRESET_FORMATS["fp8_group_act"],
                                                         PRESET_FORMATS["fp8_group_tokens"])[0])
    for q in outputs:
        assert not q.data.requires_grad and not q.scale.requires_grad


@pytest.mark.parametrize("dtype, edge", [("float8_e4m3", 248 * 2.0**120), ("float8_e5m2", 1.875 * 2.0**127)])
def test_pow2_dequantization_overflows_only_where_the_contract_says(dtype, edge):
    """Step 5's documented edges: the first |x| whose pow2 dequantization leaves fp32, per FP8 type."""
    from dataclasses import replace

    from precision_engine.numerics.formats import PRESET_FORMATS, DType, ScaleKind

    fmt = replace(PRESET_FORMATS["fp8_group_act"], scale=ScaleKind.POW2, dtype=DType(dtype))
    x = torch.tensor([edge, torch.finfo(torch.float32).max, -edge]).float()
    x = torch.cat([x, torch.nextafter(x[:1], torch.zeros(1)), torch.randn(124)]).reshape(1, 128)
    back = Q.dequantize(Q.quantize(x, fmt))
    assert back[0, :3].tolist() == [math.inf, math.inf, -math.inf]
    assert math.isfinite(back[0, 3]) and torch.isfinite(back[0, 4:]).all()
