"""Triton quantizers vs the reference, bitwise. Without CUDA these run in Triton's CPU interpreter
(tests/conftest.py sets TRITON_INTERPRET=1 first), so shapes stay tiny."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from precision_engine.numerics import quantize as Q  # noqa: E402
from precision_engine.numerics.gemm import transpose_operand  # noqa: E402
from precision_engine.numerics.formats import FP8_MAX, Axis, DType, Granularity, QuantFormat, ScaleKind  # noqa: E402

from helpers import (  # noqa: E402
    BASE, FORMATS, assert_bitwise, beside_fp8_boundaries, run_offline_compile, stable_seed)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = Path(__file__).resolve().parents[2]


def both(x: torch.Tensor, fmt: QuantFormat) -> tuple[Q.Quantized, Q.Quantized]:
    return Q.quantize(x, fmt, backend="triton"), Q.quantize(x.cpu(), fmt, backend="reference")


def to_cpu(q: Q.Quantized) -> Q.Quantized:
    return replace(q, data=q.data.cpu(), scale=q.scale.cpu())


@pytest.mark.parametrize("shape", [(13, 200), (1, 128), (67, 256), (130, 64)])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.describe())
def test_matches_reference_bitwise(fmt, shape):
    gen = torch.Generator().manual_seed(stable_seed(fmt, shape))
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


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.scale is ScaleKind.FP32], ids=lambda f: f.describe())
def test_quotients_beside_every_fp8_boundary_match_reference(fmt):
    """Where `_quotient`'s single FMA correction would show if it were not enough (`helpers.beside_fp8_boundaries`):
    every granularity's kernel, and the weight quantizer's Q(W)^T, at 256x256 (tests/numerics/gpu: 4096x4096)."""
    x = beside_fp8_boundaries(fmt, 256, stable_seed(fmt))
    got, ref = both(x.to(DEVICE), fmt)
    assert_bitwise(to_cpu(got), ref)
    if fmt.granularity is Granularity.BLOCK:  # and Q(W)^T from the same pass, as every training step takes it
        out_t = Q.block_buffers(256, 256, fmt, DEVICE)
        Q.quantize_blocks(x.to(DEVICE), fmt, backend="triton", out_t=out_t)
        assert_bitwise(to_cpu(out_t), transpose_operand(ref))


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
@pytest.mark.parametrize("shape", [(13, 200), (130, 256), (130, 192)])  # 192: half a region past the last whole one
@pytest.mark.parametrize("rows_fmt", [f for f in GROUP_FORMATS if f.axis is Axis.K][::3], ids=lambda f: f.describe())
def test_fused_grad_output_matches_both_quantizers(rows_fmt, shape, groups):
    """One kernel, two layouts: the bytes of quantize_rows_1xG and of quantize_tokens_transposed."""
    tokens_fmt = replace(rows_fmt, axis=Axis.TOKENS, group=groups[1],
                         dtype=DType.FLOAT8_E5M2 if rows_fmt.dtype is DType.FLOAT8_E4M3 else DType.FLOAT8_E4M3)
    rows_fmt = replace(rows_fmt, group=groups[0])
    gen = torch.Generator().manual_seed(stable_seed(rows_fmt, shape, groups))
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


# ------------------------------------------------------------- exactness of the device arithmetic, exhaustively

ALL_MANTISSAS = torch.arange(2**23, dtype=torch.int32) | (127 << 23)  # the bits of every fp32 in [1, 2)
PROBE = 1 << 20  # elements per probe program (Triton's largest block)


@pytest.mark.parametrize("dtype", [DType.FLOAT8_E4M3, DType.FLOAT8_E5M2])
@pytest.mark.parametrize("pow2", [False, True], ids=["fp32", "pow2"])
def test_scale_without_division_equals_the_contract_on_every_mantissa(dtype, pow2):
    """`_scale_from_amax` (a * RN(1/fmax) plus one FMA) is RN(a / fmax) for all 2**23 mantissas (the quotient's
    bits depend on a's mantissa only), at the exponents of tiny, ordinary and huge amaxes; probe kernels
    in the interpreter, whose fma rounds once as the GPU's does (~1 s)."""
    if DEVICE == "cuda":
        pytest.skip("interpreter test (the GPU runs the kernels on full-size tensors in tests/numerics/gpu)")
    fmt = QuantFormat(dtype, Granularity.GROUP, group=128, axis=Axis.K,
                      scale=ScaleKind.POW2 if pow2 else ScaleKind.FP32)
    args = T._fmt_args(fmt, None)
    for exponent in (-33, 0, 100):
        amax = ALL_MANTISSAS.view(torch.float32) * 2.0**exponent
        got = torch.empty_like(amax)
        _scale_probe[(amax.numel() // PROBE,)](amax, got, BLOCK=PROBE, FMAX=args["FMAX"], RFMAX=args["RFMAX"],
                                               POW2=pow2)
        assert torch.equal(got, Q.scale_from_amax(amax, fmt))


def _fp8_bytes(y: torch.Tensor, dtype: DType) -> torch.Tensor:
    """y's FP8 bytes, saturated as the kernels' ``cvt.rn.satfinite`` saturates (torch's cast makes NaN)."""
    return y.clamp(-FP8_MAX[dtype], FP8_MAX[dtype]).to(Q.FP8_TORCH_DTYPE[dtype]).view(torch.uint8)


def _assert_quotient_bytes(x: torch.Tensor, scale: torch.Tensor) -> None:
    """`_quotient` in the interpreter (whose fma rounds once, as the GPU's does) gives IEEE division's FP8 bytes in
    both formats."""
    got = torch.empty_like(x)
    _quotient_probe[(triton.cdiv(x.numel(), PROBE),)](x, scale, got, x.numel(), BLOCK=PROBE)
    for dtype in (DType.FLOAT8_E4M3, DType.FLOAT8_E5M2):
        assert torch.equal(_fp8_bytes(got, dtype), _fp8_bytes(x / scale, dtype))


def test_quotient_gives_the_bytes_of_ieee_division_on_requantized_values():
    """`_quotient` against IEEE division on 4M pairs shaped as the re-quantizer meets them: x = RN(q8 * s_in) for
    every E4M3 byte and non-power-of-two s_in over 30 binades, divided by the scale of a column whose amax is at
    least |x|; plus x from every finite bf16 (~2 s in the interpreter)."""
    if DEVICE == "cuda":
        pytest.skip("interpreter test")
    gen = torch.Generator().manual_seed(12)
    q8 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    q8 = q8[torch.isfinite(q8)].repeat(1 << 14)
    s_in = torch.exp(torch.randn(q8.numel(), generator=gen) * 7)
    x = q8 * s_in
    bf16 = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    x = torch.cat([x, bf16[torch.isfinite(bf16)]])
    amax = (x.abs() * torch.exp(torch.rand(x.numel(), generator=gen) * 20)).clamp(max=torch.finfo().max)
    _assert_quotient_bytes(x, Q.scale_from_amax(amax, BASE[2]))


def test_quotient_gives_the_bytes_of_ieee_division_at_every_fp8_boundary():
    """Where one FMA correction could matter: x within 4 ulps of scale * (1 + j/16) * 2**k, j = 0..15 (every
    E4M3 and E5M2 rounding boundary's mantissa) and k over both formats' ranges, for 4096 random scale
    mantissas and the 512 at either end of the binade, at exponents -50..100 (E5M2's smallest scale is about
    2**-49), either sign (~4 s in the interpreter). `scripts/quotient_one_correction.py` emulates every mantissa."""
    if DEVICE == "cuda":
        pytest.skip("interpreter test")
    gen = torch.Generator().manual_seed(31)
    mantissa = torch.cat([torch.randint(0, 1 << 23, (4096,), generator=gen), torch.arange(512),
                          torch.arange((1 << 23) - 512, 1 << 23)])
    n = mantissa.numel()
    scale = (mantissa | (127 << 23)).int().view(torch.float32) * torch.exp2(
        torch.randint(-50, 101, (n,), generator=gen).float())
    j = torch.arange(16).repeat_interleave(n)
    scale = scale.repeat(16)
    k = torch.randint(-17, 16, (16 * n,), generator=gen).float()
    sign = torch.randint(0, 2, (16 * n,), generator=gen).float() * 2 - 1
    near = (scale.double() * (1 + j / 16) * torch.exp2(k).double() * sign).float().view(torch.int32)
    x = torch.cat([(near + step).view(torch.float32) for step in range(-4, 5)])
    _assert_quotient_bytes(x, scale.repeat(9))


@pytest.mark.parametrize("uncorrected", [False, True], ids=["corrected", "uncorrected"])
def test_the_emulated_quotient_keeps_every_fp8_byte(uncorrected):
    """scripts/quotient_one_correction.py on every 256th scale mantissa (~3 s; the full run takes ~3.5 min): one
    correction changes no FP8 byte, and without it the check finds boundaries where it would."""
    args = ["--every", "256"] + (["--uncorrected"] if uncorrected else [])
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "quotient_one_correction.py"), *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == (1 if uncorrected else 0), done.stdout + done.stderr
    assert ("of them at an FP8 boundary 0" in done.stdout) != uncorrected, done.stdout


if DEVICE == "cpu":
    import triton
    import triton.language as tl

    from precision_engine.numerics import triton_quant as T

    @triton.jit
    def _scale_probe(a_ptr, o_ptr, BLOCK: tl.constexpr, FMAX: tl.constexpr, RFMAX: tl.constexpr,
                     POW2: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(o_ptr + offs, T._scale_from_amax(tl.load(a_ptr + offs), FMAX, RFMAX, POW2))

    @triton.jit
    def _quotient_probe(x_ptr, s_ptr, o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        scale = tl.load(s_ptr + offs, mask=offs < n, other=1.0)
        quotient = T._quotient(tl.load(x_ptr + offs, mask=offs < n), scale, T._reciprocal(scale, False), False, False)
        tl.store(o_ptr + offs, quotient, mask=offs < n)


# ------------------------------------------------------------------------- every kernel path, on tiny shapes

TOKENS_FMTS = [f for f in GROUP_FORMATS if f.axis is Axis.TOKENS]
# (BLOCK_C, CHUNKS, VEC): the interpreter default, one that leaves column tiles ragged, and wide loads.
TOKENS_CONFIGS = [{"BLOCK_C": 64, "CHUNKS": 2, "VEC": 4}, {"BLOCK_C": 32, "CHUNKS": 1, "VEC": 8},
                  {"BLOCK_C": 128, "CHUNKS": 1, "VEC": 16}]


def _wide_rows(shape, seed):
    """Gaussian rows whose magnitudes span ~1e-6..1e6 (non-power-of-two scales everywhere), never zero."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen) * torch.exp(torch.randn(shape[0], 1, generator=gen) * 3)


@pytest.mark.parametrize("config", TOKENS_CONFIGS, ids=str)
@pytest.mark.parametrize("shape", [(128, 256), (256, 96), (131, 64)], ids=["even", "ragged-cols", "ragged-tokens"])
def test_tokens_transposed_tiles_even_and_ragged(shape, config):
    """Masks compiled in or out (EVEN_M / EVEN_C) and every load width give the reference's bytes."""
    from precision_engine.numerics import triton_quant as T

    for fmt in TOKENS_FMTS[::3]:
        x = _wide_rows(shape, seed=shape[0] + len(config)).to(torch.bfloat16)
        got = T.quantize_tokens_transposed(x.to(DEVICE), fmt, config=config)
        assert_bitwise(to_cpu(got), Q.quantize_tokens_transposed(x, fmt, backend="reference"))


@pytest.mark.parametrize("shape", [(128, 256), (72, 160)], ids=["even", "ragged"])
@pytest.mark.parametrize("g_in", [128, 32], ids=["scale-per-token", "scale-gather"])
def test_requantize_every_tile(g_in, shape):
    """The re-quantizer (each launch config) equals quantize_tokens_transposed(dequantize(q))
    bitwise, non-power-of-two scales included (the case that once broke on the GPU)."""
    from precision_engine.numerics import triton_quant as T

    for rows_fmt in [replace(f, group=g_in) for f in GROUP_FORMATS if f.axis is Axis.K][::3]:
        x = _wide_rows(shape, seed=g_in + shape[1]).to(torch.bfloat16)
        x[1, :7] = -x[1, :7].abs() * 1e-30  # FP8 underflow to signed zeros
        saved = Q.quantize_rows_1xG(x, rows_fmt, backend="reference")
        ref = Q.requantize_tokens_transposed(saved, backend="reference")
        on_device = replace(saved, data=saved.data.to(DEVICE), scale=saved.scale.to(DEVICE))
        for config in TOKENS_CONFIGS[:2]:
            got = T.requantize_tokens_transposed(on_device, ref.fmt, config=config)
            assert_bitwise(to_cpu(got), ref)


BLOCK_FMTS = [f for f in FORMATS if f.granularity is Granularity.BLOCK and f.dtype is DType.FLOAT8_E4M3]


@pytest.mark.parametrize("shape", [(m, c) for m in (128, 200, 1) for c in (128, 256)] + [(200, 200)], ids=str)
@pytest.mark.parametrize("fmt", BLOCK_FMTS, ids=lambda f: f.describe())
def test_blocks_requantizer_matches_reference(fmt, shape):
    """The blocks re-quantizer (one scale a 128x128 tile of x^T) equals the reference composition bitwise: whole
    and padded token blocks, a partial channel block, an outlier token, FP8 -0 in Q(x), and a NaN input group,
    whose NaN reaches its block's scale."""
    from precision_engine.numerics import triton_quant as T

    m, c = shape
    x = _wide_rows(shape, seed=stable_seed(fmt, shape))
    x[m // 2] *= 1e4  # an outlier token: the rest of its blocks quantize to FP8 subnormals and zeros
    x[0, :7] = -x[0, :7].abs() * 1e-30  # FP8 underflow to signed zeros in Q(x)
    if m > 1:
        x[m - 1, c - 1] = math.nan  # a NaN input group, in the last (perhaps partial) channel block
    saved = Q.quantize_rows_1xG(x.to(torch.bfloat16), BASE[2], backend="reference")
    assert bool((saved.data.view(torch.uint8) == 0x80).any())
    ref = Q.requantize_blocks_transposed(saved, fmt, backend="reference")
    assert bool(ref.scale.isnan().any()) == (m > 1)
    on_device = replace(saved, data=saved.data.to(DEVICE), scale=saved.scale.to(DEVICE))
    got = T.requantize_blocks_transposed(on_device, fmt)
    assert got.data.stride() == ref.data.stride()
    assert_bitwise(to_cpu(got), ref)
    assert_bitwise(to_cpu(Q.requantize_blocks_transposed(on_device, fmt, backend="triton")), ref)


def test_blocks_requantizer_refuses_other_groups_and_blocks():
    """Only 1x128 inputs to 128x128 blocks: the kernel refuses the rest, and `quantize` takes the reference there."""
    from precision_engine.numerics import triton_quant as T

    saved = Q.quantize_rows_1xG(torch.randn(8, 128), replace(BASE[2], group=64), backend="reference")
    with pytest.raises(Q.OperandError, match="1x128 input groups"):
        T.requantize_blocks_transposed(saved, BASE[4])
    ours = Q.quantize_rows_1xG(torch.randn(8, 128), BASE[2], backend="reference")
    with pytest.raises(Q.OperandError, match="128x128 blocks"):
        T.requantize_blocks_transposed(ours, replace(BASE[4], block=(64, 128)))
    on_device = replace(saved, data=saved.data.to(DEVICE), scale=saved.scale.to(DEVICE))
    assert_bitwise(to_cpu(Q.requantize_blocks_transposed(on_device, BASE[4], backend="triton")),
                   Q.requantize_blocks_transposed(saved, BASE[4], backend="reference"))


@pytest.mark.parametrize("shape", [(64, 128), (96, 160)], ids=["even", "ragged"])
def test_fused_grad_output_even_tiles(shape):
    """The grad-output kernel without masks (M and C multiples of the groups) and with them."""
    rows_fmt = replace(BASE[2], group=32)
    tokens_fmt = replace(BASE[3], group=32, scale=ScaleKind.POW2)
    x = _wide_rows(shape, seed=3).to(torch.bfloat16)
    got_r, got_t = Q.quantize_rows_and_tokens_transposed(x.to(DEVICE), rows_fmt, tokens_fmt, backend="triton")
    assert_bitwise(to_cpu(got_r), Q.quantize_rows_1xG(x, rows_fmt, backend="reference"))
    assert_bitwise(to_cpu(got_t), Q.quantize_tokens_transposed(x, tokens_fmt, backend="reference"))


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_blocks_quantize_into_rows_of_a_stacked_buffer(backend):
    """quantize_blocks(out=) writes the bytes and scales it would return into the given rows of a larger
    buffer (a part of fused_linear's stacked Q(W)), leaving the other rows alone; a misfit buffer is refused."""
    fmt = BASE[4]  # e4m3 128x128
    w = (torch.randn(256, 320) * torch.exp(torch.randn(256, 1) * 2)).to(torch.bfloat16)
    data = torch.full((512, 320), 0x11, dtype=torch.uint8).view(Q.fp8_dtype(fmt)).to(DEVICE)
    scale = torch.full((4, 3), -1.0).to(DEVICE)
    got = Q.quantize_blocks(w.to(DEVICE), fmt, backend=backend, out=Q.Quantized(data[128:384], scale[1:3], fmt))
    assert got.data.data_ptr() == data[128:384].data_ptr()
    assert_bitwise(to_cpu(got), Q.quantize_blocks(w, fmt, backend="reference"))
    assert bool((data[:128].view(torch.uint8) == 0x11).all()) and bool((data[384:].view(torch.uint8) == 0x11).all())
    assert bool((scale[0] == -1).all()) and bool((scale[3] == -1).all())
    with pytest.raises(Q.OperandError, match="out= must be"):
        Q.quantize_blocks(w.to(DEVICE), fmt, backend=backend, out=Q.Quantized(data[:128], scale[:1], fmt))


@pytest.mark.parametrize("backend", ["reference", "triton"])
@pytest.mark.parametrize("shape", [(256, 320), (200, 136), (202, 136)], ids=["whole-rows", "ragged", "byte-rows"])
def test_blocks_write_the_transposed_operand_in_the_same_pass(backend, shape):
    """quantize_blocks(out_t=) also writes Q(W)^T, the bytes and scales `gemm.transpose_operand` gives, into
    the given columns of a larger buffer (a part of fused_linear's stacked Q(W)^T), other columns untouched,
    edge blocks included; Q(W) itself is unchanged by it; a misfit buffer is refused."""
    from precision_engine.numerics.gemm import transpose_operand

    fmt = BASE[4]  # e4m3 128x128
    n, k = shape
    nb = -(-n // 128)
    w = (torch.randn(n, k) * torch.exp(torch.randn(n, 1) * 2)).to(torch.bfloat16)
    w[3, :5] = -w[3, :5].abs() * 1e-30  # FP8 underflow to signed zeros
    data = torch.full((k, n + 256), 0x11, dtype=torch.uint8).view(Q.fp8_dtype(fmt)).to(DEVICE)
    scale = torch.full((-(-k // 128), nb + 2), -1.0).to(DEVICE)
    view = Q.Quantized(data[:, 128:128 + n], scale[:, 1:1 + nb], fmt)
    got = Q.quantize_blocks(w.to(DEVICE), fmt, backend=backend, out_t=view)
    ref = Q.quantize_blocks(w, fmt, backend="reference")
    assert_bitwise(to_cpu(got), ref)
    packed = replace(view, data=view.data.contiguous(), scale=view.scale.contiguous())  # strides as the ref's
    assert_bitwise(to_cpu(packed), transpose_operand(ref))
    untouched = torch.cat([data[:, :128], data[:, 128 + n:]], dim=1).view(torch.uint8)
    assert bool((untouched == 0x11).all())
    assert bool((scale[:, 0] == -1).all()) and bool((scale[:, 1 + nb:] == -1).all())
    with pytest.raises(Q.OperandError, match="out_t= must be"):
        Q.quantize_blocks(w.to(DEVICE), fmt, backend=backend, out_t=Q.Quantized(data[:, :n], scale[:, :1], fmt))


_QUOTIENT_PTX = r'''
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from precision_engine.numerics import triton_quant as T

@triton.jit
def divide(x_ptr, s_ptr, y_ptr):
    offs = tl.arange(0, 128)
    x = tl.load(x_ptr + offs)
    scale = tl.load(s_ptr)
    tl.store(y_ptr + offs, T._quotient(x, scale, T._reciprocal(scale, False), False, False))

sig = {"x_ptr": "*fp32", "s_ptr": "*fp32", "y_ptr": "*fp32"}
ptx = triton.compile(ASTSource(fn=divide, signature=sig), target=GPUTarget("cuda", 90, 32)).asm["ptx"]
body = ptx[ptx.index("div.rn.f32"):]  # after the reciprocal
ops = [line.split()[0] for line in body.splitlines() if line.strip().startswith(("sub.", "neg.", "fma.", "mul."))]
assert not any(op.startswith("sub.f32") for op in ops), ops
assert ops.count("fma.rn.f32") == 2 and "neg.f32" in ops, ops
print("ok")
'''


@pytest.mark.slow
def test_the_quotient_negates_without_subtracting():
    """Ahead-of-time sm_90 PTX (no GPU; ~5 s): the Markstein quotient's negations are `neg.f32`, never `0 - x`
    (`sub.f32`), which turns -0 into +0 and so a -0 input into the FP8 byte 0x00 where the reference gives
    0x80. Triton 3.6 (the GPU image's) lowers unary minus to `0 - x`, 3.9 to `neg.f32`, and the interpreter
    negates exactly: this test bites where Triton 3.6 is installed (the GPU image), the GPU tests everywhere."""
    run_offline_compile(_QUOTIENT_PTX, timeout=300)
