"""Quantizer kernels on a real GPU at full size: bitwise against the reference, both rounding paths, every
launch config the benchmark sweeps; the fused RMSNorm / SiLU-mul producers against the unfused ops.

The CUDA reference (the same torch ops on the GPU) is itself cross-checked against the CPU reference, so a
pass here means: compiled Triton kernel == torch on CUDA == torch on CPU, byte for byte.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from precision_engine.bench.quant import BLOCKS_REQUANT_SWEEP, DUAL_SWEEP, GLUON_REQUANT_SWEEP
from precision_engine.numerics import quantize as Q
from precision_engine.numerics.formats import FP8_MAX, Axis, DType, Granularity, QuantFormat, ScaleKind

from helpers import BASE, FORMATS, assert_bitwise, beside_fp8_boundaries, stable_seed

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

KIND = {Granularity.TENSOR: "tensor", Granularity.CHANNEL: "channel", Granularity.BLOCK: "blocks"}


def kind(fmt: QuantFormat) -> str:
    return KIND.get(fmt.granularity) or ("rows" if fmt.axis is Axis.K else "tokens_t")


def triton_quantize(x: torch.Tensor, fmt: QuantFormat, exact_round: bool) -> Q.Quantized:
    from precision_engine.numerics import triton_quant as T

    return T.QUANTIZERS[kind(fmt)](x, fmt, exact_round=exact_round)


def random_input(shape, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, device="cuda", generator=gen)
    x = x * torch.exp(torch.randn(shape[0], 1, device="cuda", generator=gen) * 4)  # rows spanning ~1e-7..1e7
    return x.to(torch.bfloat16)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.scale is ScaleKind.FP32], ids=lambda f: f.describe())
def test_quotients_beside_every_fp8_boundary_full_size(fmt):
    """Every granularity's kernel at 4096x4096 on values beside every FP8 rounding boundary, where the quotient's
    single FMA correction would show if it were not enough (`helpers.beside_fp8_boundaries`); the weight
    quantizer's Q(W)^T too."""
    from precision_engine.numerics.gemm import transpose_operand

    x = beside_fp8_boundaries(fmt, 4096, stable_seed(fmt)).cuda()
    ref = Q.quantize(x, fmt, backend="reference")  # on the GPU: test_cuda_reference_equals_cpu_reference
    assert_bitwise(Q.quantize(x, fmt, backend="triton"), ref)
    if fmt.granularity is Granularity.BLOCK:
        out_t = Q.block_buffers(4096, 4096, fmt, x.device)
        Q.quantize_blocks(x, fmt, backend="triton", out_t=out_t)
        assert_bitwise(out_t, transpose_operand(ref))


@pytest.mark.parametrize("exact_round", [False, True], ids=["hw-cvt", "exact-round"])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.describe())
def test_full_size_bitwise(fmt, exact_round):
    x = random_input((4096 + 13, 4096 + 64), seed=stable_seed(fmt))
    x[5, :300] = 0.0
    x[6, :300] = -0.0  # the quotient keeps the sign of zero (once lost to Triton's `0 - x` negation)
    x[7, 200:400] = -0.0
    assert_bitwise(triton_quantize(x, fmt, exact_round), Q.quantize(x, fmt, backend="reference"))


@pytest.mark.parametrize(
    "fmt", [BASE[2], BASE[4], replace(BASE[3], dtype=DType.FLOAT8_E5M2)], ids=lambda f: f.describe()
)
def test_cuda_reference_equals_cpu_reference(fmt):
    x = random_input((1000, 1100), seed=7)
    on_gpu = Q.quantize(x, fmt, backend="reference")
    on_cpu = Q.quantize(x.cpu(), fmt, backend="reference")
    assert_bitwise(replace(on_gpu, data=on_gpu.data.cpu(), scale=on_gpu.scale.cpu()), on_cpu)


@pytest.mark.parametrize("exact_round", [False, True], ids=["hw-cvt", "exact-round"])
@pytest.mark.parametrize("dtype", [DType.FLOAT8_E4M3, DType.FLOAT8_E5M2])
def test_midpoints_and_their_neighbours(dtype, exact_round):
    grid = torch.arange(256, dtype=torch.uint8).view(Q.FP8_TORCH_DTYPE[dtype]).float()
    grid = grid[torch.isfinite(grid) & (grid > 0)].unique()
    mids = (grid[1:] + grid[:-1]) / 2
    row = torch.cat([torch.tensor([FP8_MAX[dtype]]), mids, -mids, torch.nextafter(mids, grid[1:]),
                     torch.nextafter(mids, grid[:-1]), grid, -grid])
    x = row[None, :].repeat(3, 1).cuda()
    fmt = QuantFormat(dtype, Granularity.CHANNEL)
    got = triton_quantize(x, fmt, exact_round)
    assert_bitwise(got, Q.quantize(x, fmt, backend="reference"))


@pytest.mark.parametrize("exact_round", [False, True], ids=["hw-cvt", "exact-round"])
@pytest.mark.parametrize("fmt", BASE, ids=lambda f: f.describe())
def test_nonfinite_and_denormal_inputs(fmt, exact_round):
    x = torch.randn(1024, 1024, device="cuda")
    x[1, 3], x[300, 700], x[900, 5] = math.nan, math.inf, -math.inf
    x[500:520] = 1e-41  # fp32 subnormals
    x[600, :128] = -1e-39
    assert_bitwise(triton_quantize(x, fmt, exact_round), Q.quantize(x, fmt, backend="reference"))


ACT_VARIANTS = [replace(BASE[2], dtype=d, scale=k) for d in (DType.FLOAT8_E4M3, DType.FLOAT8_E5M2) for k in ScaleKind]
# The shipped tokens-transposed configs and their neighbours in bench/quant.py's sweep.
TOKENS_CONFIGS = [dict(zip(("BLOCK_C", "CHUNKS", "VEC", "num_warps"), c)) for c in
                  [(64, 1, 4, 4), (64, 1, 4, 2), (32, 1, 4, 2), (128, 1, 4, 8), (64, 2, 4, 4), (64, 1, 8, 4),
                   (64, 1, 4, 8), (32, 1, 4, 4), (16, 1, 4, 2)]]


@pytest.mark.parametrize("fmt", ACT_VARIANTS, ids=lambda f: f.describe())
def test_fused_requantize_full_size(fmt):
    """The re-quantizer, both rounding paths, every swept config where scales are not powers
    of two (the case that once broke), a ragged last token group: quantize_tokens_transposed(dequantize(q))."""
    from precision_engine.numerics import triton_quant as T

    saved = Q.quantize_rows_1xG(random_input((8192 + 7, 4096), seed=3), fmt)
    ref = Q.requantize_tokens_transposed(saved, backend="reference")
    assert_bitwise(T.requantize_tokens_transposed(saved, ref.fmt, exact_round=True), ref)
    assert_bitwise(Q.requantize_tokens_transposed(saved), ref)
    for config in TOKENS_CONFIGS if fmt.scale is ScaleKind.FP32 else TOKENS_CONFIGS[:1]:
        assert_bitwise(T.requantize_tokens_transposed(saved, ref.fmt, config=config), ref)


# 1x128 formats by name, two at a time (the operands' formats apart in "mixed").
_E4M3, _E5M2_POW2 = BASE[2], replace(BASE[2], dtype=DType.FLOAT8_E5M2, scale=ScaleKind.POW2)
FORMAT_PAIRS = {"e4m3-fp32": (_E4M3, _E4M3), "e5m2-pow2": (_E5M2_POW2, _E5M2_POW2), "mixed": (_E4M3, _E5M2_POW2)}


def hostile_input(shape) -> torch.Tensor:
    """`random_input` (rows spanning ~1e-7..1e7) with values that underflow FP8 by the thousand (signed zeros)
    and a NaN in the last row."""
    x = random_input(shape, seed=shape[0] + shape[1])
    x[::9, ::5] *= 1e-30
    x[-1, 7] = math.nan
    return x


@pytest.mark.parametrize("fmt", [replace(BASE[4], scale=k) for k in ScaleKind], ids=lambda f: f.describe())
@pytest.mark.parametrize("shape", [(8192, 4096), (8192 + 7, 4096), (1000, 1100), (77, 128), (300, 1001)],
                         ids=["even", "ragged-tokens", "ragged-both", "one-tile", "odd-row-stride"])
def test_blocks_requantizer_gives_the_reference_bytes(shape, fmt, monkeypatch):
    """The blocks re-quantizers (x^T in 128x128 blocks, a `wgrad_input` in blocks), the Triton kernel with exact
    rounding and at every warp count the benchmark sweeps, the Gluon program (Hopper, Triton 3.6) with 8 and 4
    token lanes, one tile a program and (rows in 16-byte runs) the ring: the reference's bytes on padded tokens, a
    partial channel block, rows whose stride is not a multiple of 4 bytes, signed zeros by the thousand and a NaN,
    into memory that held 0xFF bytes; and AUTO's dispatch: to the Gluon program for fp32 scales where it runs,
    else to the Triton kernel."""
    from precision_engine.numerics import gluon_requant as G
    from precision_engine.numerics import triton_quant as T

    saved = Q.quantize_rows_1xG(hostile_input(shape), BASE[2])
    want = Q.requantize_blocks_transposed(saved, fmt, backend="reference")
    assert_bitwise(T.requantize_blocks_transposed(saved, fmt, exact_round=True), want)
    for warps in BLOCKS_REQUANT_SWEEP:
        torch.full((4 * saved.data.numel(),), 0xFF, dtype=torch.uint8, device="cuda")  # freed: the outputs reuse it
        assert_bitwise(T.requantize_blocks_transposed(saved, fmt, config={"VEC": 4, "num_warps": warps}), want)
    gluon = G.available(saved.data.device)
    for lanes in (8, 4) if gluon else ():
        for ring in (False, True) if G.ring_copies(saved.data) else (False,):
            torch.full((4 * saved.data.numel(),), 0xFF, dtype=torch.uint8, device="cuda")
            assert_bitwise(G.requantize_blocks_transposed(saved, fmt, lanes, ring), want)
    calls = []
    program = G.requantize_blocks_transposed
    monkeypatch.setattr(G, "requantize_blocks_transposed", lambda *a: calls.append(1) or program(*a))
    assert_bitwise(Q.requantize_blocks_transposed(saved, fmt), want)
    assert calls == ([1] if gluon and fmt.scale is ScaleKind.FP32 else [])


@pytest.mark.parametrize("program", GLUON_REQUANT_SWEEP, ids=lambda p: f"w{p[0]}-lanes{p[1]}")
@pytest.mark.parametrize("formats", ["e4m3-fp32", "e5m2-pow2", "mixed"])
@pytest.mark.parametrize("shape", [(8192, 4096), (8192 + 7, 4096), (1000, 3000), (8192 - 37, 4000), (77, 128),
                                   (300, 1001)],
                         ids=["even", "ragged-tokens", "ragged-both", "ragged-16-byte-runs", "one-tile",
                              "odd-row-stride"])
def test_gluon_requantizer_gives_the_reference_bytes(shape, formats, program, monkeypatch):
    """The Gluon re-quantizer (`gluon_requant`, what AUTO runs on Hopper) against the reference and the Triton
    kernel: the same data and scale bytes on ragged tokens (padding tokens written as FP8 zeros) and columns, rows
    whose stride is not a multiple of 4 bytes (the 4-byte loads must not be assumed aligned), rows spanning
    1e-7..1e7, signed zeros by the thousand, a NaN, E4M3 and E5M2 with either scale kind (input and output
    formats apart), every program shape the benchmark sweeps (warps, lanes along tokens), one tile a program and
    (rows in 16-byte runs) the persistent cp.async ring, its scales' column stride not a multiple of 16 bytes
    (8155 tokens), over repeated launches into memory that held 0xFF bytes; and AUTO's dispatch: to it for fp32
    output scales, to the Triton kernel for power-of-two ones."""
    from precision_engine.numerics import gluon_requant as G
    from precision_engine.numerics import triton_quant as T

    in_fmt, out_base = FORMAT_PAIRS[formats]
    out_fmt = replace(out_base, axis=Axis.TOKENS)
    x = hostile_input(shape)
    saved = Q.quantize_rows_1xG(x, in_fmt)
    if not G.available(x.device):
        pytest.skip("the Gluon re-quantizer runs on Hopper under Triton 3.6 only")
    want = Q.requantize_tokens_transposed(saved, out_fmt, backend="reference")
    assert_bitwise(T.requantize_tokens_transposed(saved, out_fmt), want)
    for ring in (False, True) if G.ring_copies(saved.data) else (False,):
        for _ in range(3):
            torch.full((4 * x.numel(),), 0xFF, dtype=torch.uint8, device="cuda")  # freed: the outputs reuse it
            assert_bitwise(G.requantize_tokens_transposed(saved, out_fmt, *program, ring), want)
    calls = []
    gluon = G.requantize_tokens_transposed
    monkeypatch.setattr(G, "requantize_tokens_transposed", lambda *a: calls.append(1) or gluon(*a))
    assert_bitwise(Q.requantize_tokens_transposed(saved, out_fmt), want)
    assert calls == ([1] if out_fmt.scale is ScaleKind.FP32 else [])


@pytest.mark.parametrize("formats", ["e4m3-fp32", "e5m2-pow2", "mixed"])
@pytest.mark.parametrize("shape", [(8192, 6144), (8192 + 7, 4096), (1000, 3008), (77, 128), (300, 1000)],
                         ids=["qkv-dy", "ragged-tokens", "ragged-both", "one-tile", "fp8-rows-not-tma-legal"])
def test_gluon_grad_output_gives_the_triton_kernels_bytes(shape, formats, monkeypatch):
    """The TMA-fed grad-output quantizer (`gluon_grad_output`, what AUTO runs on Hopper) against the Triton
    kernel: the same data and scale bytes of both operands (1x128 rows, 128x1 tokens transposed) on ragged tokens
    and columns (TMA zero-fills past the edges; padding tokens written as FP8 zeros), rows spanning 1e-7..1e7,
    signed zeros by the thousand, a NaN, E4M3 and E5M2 with either scale kind (the two operands' formats apart),
    over repeated launches into memory that held 0xFF bytes; and the public entry's dispatch to it, which sends
    C = 1000 (Q_rows' FP8 rows not 16-byte aligned) to the Triton kernel."""
    from precision_engine.numerics import gluon_grad_output as G
    from precision_engine.numerics import triton_quant as T

    rows_fmt, tokens_base = FORMAT_PAIRS[formats]
    tokens_fmt = replace(tokens_base, axis=Axis.TOKENS)
    x = hostile_input(shape)
    if not G.runs(x[:, :128], rows_fmt, tokens_fmt):
        pytest.skip("the Gluon grad-output quantizer runs on Hopper under Triton 3.6 only")
    want_r, want_t = T.quantize_rows_and_tokens_transposed(x, rows_fmt, tokens_fmt)
    takes = shape[1] % 16 == 0
    assert G.runs(x, rows_fmt, tokens_fmt) is takes
    for _ in range(3 if takes else 0):
        torch.full((4 * x.numel(),), 0xFF, dtype=torch.uint8, device="cuda")  # freed: the outputs reuse it
        got_r, got_t = G.quantize_rows_and_tokens_transposed(x, rows_fmt, tokens_fmt)
        assert_bitwise(got_r, want_r)
        assert_bitwise(got_t, want_t)
    calls = []
    gluon = G.quantize_rows_and_tokens_transposed
    monkeypatch.setattr(G, "quantize_rows_and_tokens_transposed", lambda *a: calls.append(1) or gluon(*a))
    auto_r, auto_t = Q.quantize_rows_and_tokens_transposed(x, rows_fmt, tokens_fmt)
    assert_bitwise(auto_r, want_r)
    assert_bitwise(auto_t, want_t)
    assert len(calls) == takes  # AUTO took the Gluon kernel exactly where it runs


@pytest.mark.parametrize("shape", [(14336, 4096), (4096, 14336), (1000, 3000)], ids=["up", "down", "ragged"])
def test_blocks_with_the_transposed_operand_full_size(shape):
    """Q(W)^T written in the quantizer's own pass (what the training step uses on every new weight version)
    equals the byte transpose of Q(W) that dgrad took before, bitwise, and Q(W) itself is unchanged."""
    from precision_engine.numerics.gemm import transpose_operand

    fmt = BASE[4]  # e4m3 128x128
    w = random_input(shape, seed=shape[0])
    out_t = Q.block_buffers(shape[1], shape[0], fmt, w.device)
    got = Q.quantize_blocks(w, fmt, out_t=out_t)
    alone = Q.quantize_blocks(w, fmt)
    assert_bitwise(got, alone)
    assert_bitwise(out_t, transpose_operand(alone))


@pytest.mark.parametrize("rows", [(4096, 1024, 1024), (14336, 14336), (1024, 1000)], ids=["qkv", "gate_up", "ragged"])
def test_stacked_parts_with_the_transposed_operand_full_size(rows):
    """A fused GEMM's parts quantized into one Q(W) / Q(W)^T pair (a compiled or captured step's weights):
    the bits of quantizing their stack and transposing it."""
    from precision_engine.numerics.gemm import transpose_operand

    fmt = BASE[4]
    parts = [random_input((r, 4096), seed=i).bfloat16() for i, r in enumerate(rows)]
    wq, wt = Q.quantize_blocks_stacked(parts, fmt, transposed=True)
    alone = Q.quantize_blocks(torch.cat(parts), fmt)
    assert_bitwise(wq, alone)
    assert_bitwise(wt, transpose_operand(alone))


def test_layouts_feed_scaled_mm_without_copies():
    """fprop (1x128 x 128x128) and wgrad (tokens^T x tokens^T) straight from our layouts into torch._scaled_mm."""
    m, k, n = 512, 1024, 768
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    xq = Q.quantize_rows_1xG(x, BASE[2])
    wq = Q.quantize_blocks(w, BASE[4])
    y = torch._scaled_mm(xq.data, wq.data.t(), scale_a=xq.scale, scale_b=wq.scale.t(), out_dtype=torch.bfloat16)
    y_ref = Q.dequantize(xq) @ Q.dequantize(wq).t()
    assert (y.float() - y_ref).norm() / y_ref.norm() < 1e-2
    dyt = Q.quantize_tokens_transposed(dy, BASE[3])
    xt = Q.quantize_tokens_transposed(x, BASE[3])
    dw = torch._scaled_mm(dyt.data, xt.data.t(), scale_a=dyt.scale, scale_b=xt.scale.t(), out_dtype=torch.bfloat16)
    dw_ref = Q.dequantize(dyt) @ Q.dequantize(xt).t()
    assert (dw.float() - dw_ref).norm() / dw_ref.norm() < 1e-2


@pytest.mark.parametrize("exact_round", [False, True], ids=["hw-cvt", "exact-round"])
@pytest.mark.parametrize("rows_fmt", [BASE[2], replace(BASE[2], dtype=DType.FLOAT8_E5M2, scale=ScaleKind.POW2)],
                         ids=lambda f: f.describe())
def test_fused_grad_output_full_size(rows_fmt, exact_round):
    from precision_engine.numerics import triton_quant as T

    tokens_fmt = replace(rows_fmt, axis=Axis.TOKENS)
    x = random_input((8192 + 13, 4096 + 64), seed=11)
    x[7, 9] = math.nan
    x[8, :500], x[300:600, 11] = -0.0, -0.0
    for config in (None, *({"BLOCK_M": bm, "BLOCK_C": bc, "num_warps": w} for bm, bc, w in DUAL_SWEEP)):
        got_r, got_t = T.quantize_rows_and_tokens_transposed(x, rows_fmt, tokens_fmt, exact_round=exact_round,
                                                             config=config)
        assert_bitwise(got_r, Q.quantize_rows_1xG(x, rows_fmt, backend="reference"))
        assert_bitwise(got_t, Q.quantize_tokens_transposed(x, tokens_fmt, backend="reference"))


@pytest.mark.parametrize("shape", [(4096 + 13, 4096 + 64), (4096, 4096)], ids=["ragged", "even"])
@pytest.mark.parametrize("config", TOKENS_CONFIGS, ids=str)
def test_tokens_transposed_every_config(config, shape):
    from precision_engine.numerics import triton_quant as T

    x = random_input(shape, seed=5)
    for fmt in (BASE[3], replace(BASE[3], dtype=DType.FLOAT8_E5M2, scale=ScaleKind.POW2)):
        assert_bitwise(T.quantize_tokens_transposed(x, fmt, config=config), Q.quantize(x, fmt, backend="reference"))


# ----------------------------------------------------------- fused producers (numerics/fused_quant.py)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


@pytest.mark.parametrize("fmt", ACT_VARIANTS[::3], ids=lambda f: f.describe())
@pytest.mark.parametrize("shape", [(8192, 4096), (8192 + 5, 14336)], ids=["8B-hidden", "14336"])
def test_rms_norm_quantize_full_size(shape, fmt):
    """y is the batch-invariant RMSNorm kernel's (invariant.rms_norm on CUDA), bit for bit, and its FP8 half
    the 1x128 quantizer's of that y; the quantization is also cross-checked against the CPU reference."""
    from precision_engine.numerics import fused_quant as F
    from precision_engine.numerics import invariant

    x = random_input(shape, seed=21)
    w = (1 + 0.1 * torch.randn(shape[1], device="cuda")).to(torch.bfloat16)
    y, q = F.rms_norm_quantize(x, w, 1e-5, fmt)
    assert torch.equal(_bits(y), _bits(invariant.rms_norm(x, w, 1e-5)))
    assert_bitwise(q, Q.quantize_rows_1xG(y, fmt))
    cpu = Q.quantize_rows_1xG(y[:512].cpu(), fmt, backend="reference")
    assert torch.equal(q.data[:512].cpu().view(torch.uint8), cpu.data.view(torch.uint8))


@pytest.mark.parametrize("fmt", ACT_VARIANTS[::3], ids=lambda f: f.describe())
@pytest.mark.parametrize("shape", [(8192, 14336), (1000, 4096 + 64)], ids=["8B-mlp", "ragged"])
def test_silu_mul_quantize_full_size(shape, fmt):
    """h is torch's invariant.silu(gate) * up on CUDA, bit for bit; the FP8 half is quantize_rows_1xG(h)'s."""
    from precision_engine.numerics import fused_quant as F
    from precision_engine.numerics import invariant

    gate = (random_input(shape, seed=22).float().clamp(-1e3, 1e3) * 0.1).to(torch.bfloat16)
    up = random_input(shape, seed=23)
    h, q = F.silu_mul_quantize(gate, up, fmt)
    assert torch.equal(_bits(h), _bits(invariant.silu(gate) * up))
    assert_bitwise(q, Q.quantize_rows_1xG(h, fmt))


def test_silu_mul_every_bf16_gate():
    """Every bf16 bit pattern as gate (subnormals, +-0, exp overflow and underflow, Inf, NaN), against torch."""
    from precision_engine.numerics import fused_quant as F
    from precision_engine.numerics import invariant

    gate = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32, device="cuda").to(torch.int16).view(torch.bfloat16)
    gate = gate.reshape(512, 128)
    up = random_input((512, 128), seed=24)
    h, q = F.silu_mul_quantize(gate, up, BASE[2])
    ref = invariant.silu(gate) * up
    assert torch.equal(torch.isnan(h), torch.isnan(ref))
    keep = ~torch.isnan(ref)
    assert torch.equal(_bits(h)[keep], _bits(ref)[keep])
    assert_bitwise(q, Q.quantize_rows_1xG(h, BASE[2]))


def test_fused_producers_differentiate_as_the_unfused_ops():
    from precision_engine.numerics import fused_quant as F
    from precision_engine.numerics import invariant

    x = random_input((300, 4096), seed=25).requires_grad_()
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16).requires_grad_()
    gy = random_input((300, 4096), seed=26)
    y, _ = F.rms_norm_quantize(x, w, 1e-5, BASE[2])
    got = torch.autograd.grad(y, (x, w), gy)
    ref = torch.autograd.grad(invariant.rms_norm(x, w, 1e-5), (x, w), gy)
    assert all(torch.equal(_bits(a), _bits(b)) for a, b in zip(got, ref))
    gate, up = random_input((300, 4096), seed=27).requires_grad_(), random_input((300, 4096), seed=28).requires_grad_()
    h, _ = F.silu_mul_quantize(gate, up, BASE[2])
    got = torch.autograd.grad(h, (gate, up), gy)
    ref = torch.autograd.grad(invariant.silu(gate) * up, (gate, up), gy)
    assert all(torch.equal(_bits(a), _bits(b)) for a, b in zip(got, ref))


def test_silu_mul_backward_full_size_packed():
    """The 8B's fused gate/up output [8192, 2 x 14336]: silu_mul_quantize_packed's gradient is autograd's
    through the unfused ops on the two halves, concatenated, bit for bit, in one contiguous tensor."""
    from precision_engine.numerics import fused_quant as F
    from precision_engine.numerics import invariant

    both = (random_input((8192, 2 * 14336), seed=29).float().clamp(-1e3, 1e3) * 0.1).to(torch.bfloat16)
    dh = random_input((8192, 14336), seed=30)
    packed = both.clone().requires_grad_()
    h, _ = F.silu_mul_quantize_packed(packed, BASE[2])
    (got,) = torch.autograd.grad(h, (packed,), dh)
    gate, up = (half.clone().requires_grad_() for half in both.split(14336, dim=-1))
    ref = torch.cat(torch.autograd.grad(invariant.silu(gate) * up, (gate, up), dh), dim=-1)
    assert got.is_contiguous() and torch.equal(_bits(got), _bits(ref))


def test_silu_mul_backward_every_bf16_gate():
    """Every bf16 bit pattern as gate: the backward kernel's gradients equal autograd's through invariant.silu
    (NaN only where gate is not finite: where exp(-gate) is inf or 0 both take the limit of the term that
    would multiply 0 by inf)."""
    from precision_engine.numerics import fused_quant as F
    from precision_engine.numerics import invariant

    bits = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32, device="cuda").to(torch.int16)
    gate = bits.view(torch.bfloat16).reshape(512, 128).clone().requires_grad_()
    up = random_input((512, 128), seed=31).requires_grad_()
    dh = random_input((512, 128), seed=32)
    got = torch.autograd.grad(F.silu_mul_quantize(gate, up, BASE[2])[0], (gate, up), dh)
    ref = torch.autograd.grad(invariant.silu(gate) * up, (gate, up), dh)
    finite = torch.isfinite(gate.detach())
    for a, b in zip(got, ref):
        assert torch.equal(torch.isnan(a), torch.isnan(b))
        assert not bool(torch.isnan(a[finite]).any())
        keep = ~torch.isnan(b)
        assert torch.equal(_bits(a)[keep], _bits(b)[keep])
