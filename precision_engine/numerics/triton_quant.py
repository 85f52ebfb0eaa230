"""Triton FP8 quantizers: bit-exact twins of the reference in `numerics.quantize` (read its contract first).

One pass over the input per kernel, scales computed in registers, outputs written in the layouts the GEMMs
read directly (1x128 scales M-major, tokens-transposed data [C, M_pad] with (1, C)-strided scales), so no
layout copy follows. These kernels are instruction-bound long before they are bandwidth-bound (on an H200 the
measured times track the SASS instruction count per element: about 0.05 ps per instruction and element), so
every step is chosen for its instruction count as much as for its exactness:

- Scale, contract step 2: ``RN(a / fmax)`` as ``q = a * RN(1/fmax)`` plus one FMA correction (`_scale_from_amax`):
  exact for every normal fp32 a, checked on all 2**23 mantissas for 448 and 57344 (the quotient's bits depend
  on a's mantissa only), and branch-free, unlike ``div.rn`` with its range check and slow path.
- Division, step 4: the FP8 byte of ``RN(x / scale)`` from one correctly rounded reciprocal per group and one
  FMA correction (`_quotient`, checked on every scale mantissa at every FP8 rounding boundary), or ``div.rn``
  per element where a bench asks. Power-of-two scales multiply by the exact reciprocal instead (one
  instruction). Plain ``/`` on fp32 compiles to the approximate ``div.full.f32`` and is never used.
- amax is a NaN-propagating float max of ``|x|`` (``max.NaN.f32``, one instruction with the absolute value
  folded in); a NaN or Inf amax then turns the scale into NaN (contract step 3).
- The final fp32 -> fp8 rounding: on the GPU the hardware ``cvt.rn.satfinite`` is round-to-nearest-even
  (checked against torch by tests/numerics/gpu); the tokens-transposed kernels issue it from inline PTX on four
  values of consecutive tokens at once (`_fp8_word`), so the bytes arrive packed into the 32-bit words that
  are transposed and stored (packing single bytes with shifts and ors cost about 4 instructions per element).
  Triton's CPU interpreter rounds ties and binade carries wrongly (e.g. 124.0 -> 64.0 in E4M3, measured with
  triton 3.9), so with ``EXACT_ROUND`` the kernels first round to the FP8 grid in fp32 arithmetic
  (`_round_to_fp8_grid`, exact) and the cast then only sees representable values, which every cast maps
  exactly. EXACT_ROUND is on under the interpreter and can be forced on the GPU (``exact_round=True``) where
  the GPU tests compare both paths.
- Tiles are addressed from a 64-bit base pointer per program plus 32-bit offsets, and loads along a row are
  capped at `VEC` contiguous elements (`_capped`): each thread then holds fewer columns, and the per-column
  scale and reciprocal of the tokens-transposed kernels (computed once per column a thread holds) are shared
  by more of its elements. Masks are compiled in only where a tile can cross the tensor's edge.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from precision_engine.errors import OperandError
from precision_engine.numerics.contract import (TRITON_INTERPRET, Quantized, block_buffers, blocks_t_buffers, fp8_dtype,
                                                rows_buffers, scale_from_amax, tokens_buffers)
from precision_engine.numerics.formats import FP8_MAX, Axis, DType, Granularity, QuantFormat, ScaleKind
from precision_engine.numerics.pdl import release_dependents

_INTERPRET = tl.constexpr(TRITON_INTERPRET)

# Mantissa bits and smallest normal exponent of each FP8 type: the grid _round_to_fp8_grid rounds onto.
_FP8_GRID = {DType.FLOAT8_E4M3: (3, -6), DType.FLOAT8_E5M2: (2, -14)}
# RN(1 / fmax) in fp32, the multiplier of `_scale_from_amax` (an fp32 division, so it is correctly rounded).
_RECIPROCAL_FMAX = {d: (torch.ones(()) / torch.tensor(fmax)).item() for d, fmax in FP8_MAX.items() if d.is_fp8}


# ---------------------------------------------------------------------------------------- shared device code


@triton.jit
def _max_nan(a, b):
    """max that returns NaN if either side is NaN (``max.NaN.f32``): combines |x| into an amax."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _amax(a, axis: tl.constexpr):
    """max of a = |x| along `axis`, NaN if any element is NaN. The interpreter runs a reduction with a custom
    combiner element by element in Python, so there the max is taken over the int32 bits instead (for |x|,
    the integer order is the float order with every finite < Inf < NaN): the same amax, or a NaN for a NaN."""
    if _INTERPRET:
        m = tl.max(a.to(tl.int32, bitcast=True), axis).to(tl.float32, bitcast=True)
    else:
        m = tl.reduce(a, axis, _max_nan)
    return m


@triton.jit
def _scale_from_amax(amax, FMAX: tl.constexpr, RFMAX: tl.constexpr, POW2: tl.constexpr):
    """Contract steps 2-3 (see quantize.scale_from_amax): RN(max(amax, eps) / fmax) without a division.

    q = a * RN(1/fmax) is within 1.5 ulps, and one FMA correction makes it exactly RN(a / fmax) for every a
    in [eps, FLT_MAX] (the quotient is normal there): checked on every fp32 mantissa for both fmax values,
    which share the mantissa 1.75. POW2 rounds the quotient up to a power of two on the bits (exact, see
    `numerics.quantize`). A NaN amax passes `maximum` as eps, so the final test is what makes it NaN."""
    a = tl.maximum(amax, 1e-10)
    q = a * RFMAX
    scale = tl.fma(tl.fma(-q, FMAX, a), RFMAX, q)
    if POW2:
        bits = scale.to(tl.int32, bitcast=True)
        exponent = bits & 0x7F800000
        bits = tl.where((bits & 0x007FFFFF) != 0, exponent + 0x00800000, exponent)
        scale = bits.to(tl.float32, bitcast=True)
    return tl.where(amax < float("inf"), scale, float("nan"))  # NaN < inf is false too


@triton.jit
def _reciprocal(scale, POW2: tl.constexpr):
    """RN(1 / scale), once per group. A power of two's reciprocal is its exponent negated on the bits (scales
    lie in [2**-50, 2**120], so both are normal); NaN stays NaN."""
    if POW2:
        inv = (0x7F000000 - scale.to(tl.int32, bitcast=True)).to(tl.float32, bitcast=True)
        inv = tl.where(scale == scale, inv, scale)
    else:
        inv = tl.math.div_rn(scale * 0.0 + 1.0, scale)  # 1.0 (scales are finite or NaN), in Gluon's kernels too
    return inv


@triton.jit
def _quotient(x, scale, inv, POW2: tl.constexpr, IEEE_DIV: tl.constexpr):
    """x / scale for the FP8 cast that follows (contract step 4), given inv = RN(1 / scale): the cast gives
    the byte of fp8_rne(RN(x / scale)).

    Power-of-two scales: x * inv is the exact quotient rounded once. Otherwise q = RN(x * inv), within 1.5
    ulps, takes one FMA correction (Markstein's): 1 + 2 instructions, where ``div.rn.f32`` takes about 15 with
    a branch. The corrected quotient can differ from RN(x / scale) only by an ulp, and the byte only where one
    of the two is an FP8 rounding boundary; every boundary of E4M3 and E5M2 has an fp32 mantissa on the 1/16
    grid, and `scripts/quotient_one_correction.py` checks every scale mantissa against every x within 4 ulps of
    scale * (1 + j/16): no byte differs. Markstein's second correction, which RN(x / scale) needs in general,
    would cost 2 more FMAs an element and change no byte. For |x| below about 2**-100 the remainder turns
    subnormal, but scales are at least 2**-50, so such quotients round to a signed FP8 zero either way.

    The correction is q + (scale*q - x) * -inv, so that x = -0 keeps its sign (-0 + -0); the negations are
    multiplications by -1, because Triton 3.6 (the GPU image's) lowers unary minus on floats to ``0 - x``,
    which is +0 for x = +0: written as -(scale*q - x) * inv, the H200 turned every -0 into +0 (2026-12-03;
    Triton 3.9 emits ``neg.f32`` and the interpreter negates exactly, so only the GPU tests and
    test_the_quotient_negates_without_subtracting under Triton 3.6 see it). NaN scales stay NaN. IEEE_DIV
    divides with ``div.rn`` per element instead (the same bytes, at the instruction count of a division)."""
    if POW2:
        y = x * inv
    elif IEEE_DIV:
        y = tl.math.div_rn(x, scale)
    else:
        q = x * inv
        y = tl.fma(tl.fma(scale, q, x * -1.0), inv * -1.0, q)
    return y


@triton.jit
def _round_to_fp8_grid(y, MBITS: tl.constexpr, EMIN: tl.constexpr):
    """Round fp32 y (|y| <= fmax or NaN) to the nearest-even FP8 value, exactly, in fp32 arithmetic.

    The FP8 quantum at |y| is 2**(max(e, EMIN) - MBITS); |y| / quantum is exact (a power of two), rounded to
    an integer with the 2**23 trick (round-to-nearest-even fp32 adds), and scaled back exactly. The sign bit
    is restored on the bits, so negative values that round to zero stay -0 as torch's cast gives. NaN leaves
    with exactly the FP8 type's mantissa bits set (the interpreter's cast truncates payloads without carrying:
    the usual 0x7FC00000 would come out as 384.0).
    """
    bits = y.to(tl.int32, bitcast=True)
    abs_bits = bits & 0x7FFFFFFF
    sign = bits ^ abs_bits
    e = tl.maximum((abs_bits >> 23) - 127, EMIN)
    quantum = ((e - MBITS + 127) << 23).to(tl.float32, bitcast=True)
    inv_quantum = ((127 - e + MBITS) << 23).to(tl.float32, bitcast=True)
    t = abs_bits.to(tl.float32, bitcast=True) * inv_quantum
    t = (t + 8388608.0) - 8388608.0
    out = (t * quantum).to(tl.int32, bitcast=True) | sign
    nan_bits = 0x7F800000 | (((1 << MBITS) - 1) << (23 - MBITS))
    out = tl.where(abs_bits > 0x7F800000, sign | nan_bits, out)
    return out.to(tl.float32, bitcast=True)


@triton.jit
def _to_fp8(y, out_ty: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """fp8_rne of a quotient. No clamp: `scale` always comes from the amax of the very values being cast, so
    |x / scale| <= RN(amax / RN(amax / fmax)) <= fmax + 1 fp32 ulp, which FP8 round-to-nearest-even maps to
    fmax anyway; the hardware cast also saturates (``satfinite``). NaN stays NaN on both paths."""
    if EXACT_ROUND:
        y = _round_to_fp8_grid(y, MBITS, EMIN)
    return y.to(out_ty, fp_downcast_rounding="rtne")


@triton.jit
def _fp8_bits(q):
    return q.to(tl.uint8, bitcast=True).to(tl.uint32)


@triton.jit
def _fp8_word(y0, y1, y2, y3, out_ty: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
              EXACT_ROUND: tl.constexpr, HW_PACK: tl.constexpr):
    """The FP8 bytes of four quotients as one little-endian uint32 (y0 in the lowest byte).

    HW_PACK: two ``cvt.rn.satfinite.*x2.f32`` and a register move (sm_89+), the same conversion Triton emits
    for a cast, issued on the four values that share a word. Otherwise casts and shifts (the interpreter)."""
    if EXACT_ROUND:
        y0 = _round_to_fp8_grid(y0, MBITS, EMIN)
        y1 = _round_to_fp8_grid(y1, MBITS, EMIN)
        y2 = _round_to_fp8_grid(y2, MBITS, EMIN)
        y3 = _round_to_fp8_grid(y3, MBITS, EMIN)
    if HW_PACK:
        if out_ty == tl.float8e4nv:
            w = tl.inline_asm_elementwise(
                "{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1; "
                "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3; mov.b32 $0, {lo, hi}; }",
                "=r,f,f,f,f", [y0, y1, y2, y3], dtype=tl.uint32, is_pure=True, pack=1)
        else:
            w = tl.inline_asm_elementwise(
                "{ .reg .b16 lo, hi; cvt.rn.satfinite.e5m2x2.f32 lo, $2, $1; "
                "cvt.rn.satfinite.e5m2x2.f32 hi, $4, $3; mov.b32 $0, {lo, hi}; }",
                "=r,f,f,f,f", [y0, y1, y2, y3], dtype=tl.uint32, is_pure=True, pack=1)
    else:
        w = (_fp8_bits(y0.to(out_ty, fp_downcast_rounding="rtne"))
             | (_fp8_bits(y1.to(out_ty, fp_downcast_rounding="rtne")) << 8)
             | (_fp8_bits(y2.to(out_ty, fp_downcast_rounding="rtne")) << 16)
             | (_fp8_bits(y3.to(out_ty, fp_downcast_rounding="rtne")) << 24))
    return w


@triton.jit
def _capped(c, VEC: tl.constexpr):
    """The same offsets as c, seen by the compiler as contiguous in runs of VEC only, which caps the vector
    width of the accesses (and so the columns per thread) at VEC."""
    return (c // VEC) * VEC + c % VEC


@triton.jit
def _load_rows(base, rows, cols, stride, row_ok, col_ok, EVEN: tl.constexpr):
    """base[rows * stride + cols] as fp32 (32-bit offsets), 0 outside the tensor unless EVEN."""
    offs = rows[:, None] * stride + cols[None, :]
    if EVEN:
        x = tl.load(base + offs)
    else:
        x = tl.load(base + offs, mask=row_ok[:, None] & col_ok[None, :], other=0.0)
    return x.to(tl.float32)


@triton.jit
def _store_fp8_rows(base, rows, cols, stride, y, mask, MBITS: tl.constexpr, EMIN: tl.constexpr,
                    EXACT_ROUND: tl.constexpr):
    """y [rows, cols] as FP8 into base[rows * stride + cols] under `mask` (offsets in the type of rows)."""
    tl.store(base + rows[:, None] * stride + cols[None, :],
             _to_fp8(y, base.dtype.element_ty, MBITS, EMIN, EXACT_ROUND), mask=mask)


@triton.jit
def _store_tokens_t(q_ptr, y0, y1, y2, y3, col0, tok0, c, j, col_ok, j_ok, M_pad, PACK: tl.constexpr,
                    EVEN_C: tl.constexpr, EVEN_T: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
                    EXACT_ROUND: tl.constexpr, HW_PACK: tl.constexpr):
    """Store the quotients y_i [SUB, BLOCK_C] of tokens tok0 + PACK*j + i, transposed, into q [C, M_pad]: as
    words of four tokens when PACK = 4 (the transpose through shared memory then moves 32-bit words, and the
    global stores are 16-byte vectors along the output rows), as single bytes otherwise."""
    out_ty = q_ptr.dtype.element_ty
    if PACK == 4:
        w = _fp8_word(y0, y1, y2, y3, out_ty, MBITS, EMIN, EXACT_ROUND, HW_PACK)
        ptr = q_ptr.to(tl.pointer_type(tl.uint32))
    else:
        w = _to_fp8(y0, out_ty, MBITS, EMIN, EXACT_ROUND)
        ptr = q_ptr
    pitch = M_pad // PACK
    base = ptr + col0.to(tl.int64) * pitch + tok0 // PACK
    offs = c[:, None] * pitch + j[None, :]
    if EVEN_C and EVEN_T:
        tl.store(base + offs, tl.trans(w))
    else:
        tl.store(base + offs, tl.trans(w), mask=col_ok[:, None] & j_ok[None, :])


# ------------------------------------------------------------------------------------------------ kernels


@triton.jit
def _rows_kernel(x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_qm, stride_sm, stride_sg,
                 G: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_M: tl.constexpr, GROUPS: tl.constexpr,
                 FMAX: tl.constexpr, RFMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
                 POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """1xG groups along K: one program owns BLOCK_M rows x GROUPS consecutive groups (unrolled, so their
    loads are all in flight together). Also per-channel, with G = K and GROUPS = 1. A decode GEMM launched
    with PDL after it may start at once (`pdl`)."""
    release_dependents()
    _rows_program(tl.program_id(0), tl.program_id(1), x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_qm, stride_sm,
                  stride_sg, G, BLOCK_G, BLOCK_M, GROUPS, FMAX, RFMAX, MBITS, EMIN, POW2, EXACT_ROUND)


@triton.jit
def _rows_program(pid_m, pid_k, x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_qm, stride_sm, stride_sg,
                  G: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_M: tl.constexpr, GROUPS: tl.constexpr,
                  FMAX: tl.constexpr, RFMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
                  POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """`_rows_kernel`'s program (pid_m, pid_k), shared with the grad-output kernel."""
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_ok = rows < M
    offs = tl.arange(0, BLOCK_G)
    for i in tl.static_range(GROUPS):
        group = pid_k * GROUPS + i
        cols = group * G + offs
        mask = row_ok[:, None] & ((offs < G) & (cols < K))[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        _quantize_row_groups(x, q_ptr, s_ptr, rows, row_ok, cols, mask, group, K, stride_qm, stride_sm, stride_sg,
                             G, FMAX, RFMAX, MBITS, EMIN, POW2, EXACT_ROUND)


@triton.jit
def _quantize_row_groups(x, q_ptr, s_ptr, rows, row_ok, cols, mask, group, K, stride_qm, stride_sm, stride_sg,
                         G: tl.constexpr, FMAX: tl.constexpr, RFMAX: tl.constexpr, MBITS: tl.constexpr,
                         EMIN: tl.constexpr, POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Quantize one [rows, G] fp32 tile as 1xG groups (one per row) and store data and scales: the body of
    `_rows_kernel`, shared with the fused producers of `triton_fused_quant`."""
    scale = _scale_from_amax(_amax(tl.abs(x), 1), FMAX, RFMAX, POW2)
    y = _quotient(x, scale[:, None], _reciprocal(scale, POW2)[:, None], POW2, False)
    _store_fp8_rows(q_ptr, rows, cols, stride_qm, y, mask, MBITS, EMIN, EXACT_ROUND)
    # `0 * rows` broadcasts the group test to a tensor: the interpreter rejects tensor & scalar masks.
    tl.store(s_ptr + rows * stride_sm + group * stride_sg, scale, mask=row_ok & (group * G + 0 * rows < K))


@triton.jit
def _tokens_t_load(x_ptr, s_in_ptr, toks, cols, tok_ok, col_ok, stride_xm, stride_sig, col0,
                   G_IN: tl.constexpr, BLOCK_C: tl.constexpr, DEQUANT: tl.constexpr, EVEN: tl.constexpr):
    """x[toks, cols] in fp32 (toks, cols relative to the bases); with DEQUANT, q_in * s_in as `dequantize`
    computes it (one fp32 multiply, rounded once), s_in read per token when the column block lies inside one
    input group, per element otherwise."""
    x = _load_rows(x_ptr, toks, cols, stride_xm, tok_ok, col_ok, EVEN)
    if DEQUANT:
        if G_IN % BLOCK_C == 0:
            if EVEN:
                s = tl.load(s_in_ptr + toks)
            else:
                s = tl.load(s_in_ptr + toks, mask=tok_ok, other=1.0)
            x = x * s[:, None]
        else:
            offs = toks[:, None] + ((col0 + cols) // G_IN - col0 // G_IN)[None, :] * stride_sig
            if EVEN:
                s = tl.load(s_in_ptr + offs)
            else:
                s = tl.load(s_in_ptr + offs, mask=tok_ok[:, None] & col_ok[None, :], other=1.0)
            x = x * s
    return x


@triton.jit
def _tokens_t_kernel(x_ptr, s_in_ptr, q_ptr, s_ptr, M, C, M_pad, stride_xm, stride_sig,
                     G: tl.constexpr, G_IN: tl.constexpr, PACK: tl.constexpr, BLOCK_SUB: tl.constexpr,
                     BLOCK_C: tl.constexpr, CHUNKS: tl.constexpr, VEC: tl.constexpr, DEQUANT: tl.constexpr,
                     BLOCK_SCALE: tl.constexpr, EVEN_M: tl.constexpr, EVEN_C: tl.constexpr, IEEE_DIV: tl.constexpr,
                     HW_PACK: tl.constexpr, FMAX: tl.constexpr, RFMAX: tl.constexpr, MBITS: tl.constexpr,
                     EMIN: tl.constexpr, POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Gx1 groups along tokens, written transposed: q [C, M_pad], scales [M_pad/G, C] (= [C, M_pad/G] with
    strides (1, C)). One program per (token group, CHUNKS x BLOCK_C columns); the group is loaded as PACK
    tiles of G/PACK rows (tokens PACK*j + i in tile i), whose quotients `_store_tokens_t` packs into words.
    With DEQUANT the input is a saved 1xG_IN FP8 activation (`s_in_ptr`: its M-major scales), dequantized in
    registers: the wgrad re-quantization, in one pass and with no fp32 copy. Padding tokens [M, M_pad) load as
    0 and are written as FP8 zeros, as the contract requires. BLOCK_SCALE: BLOCK_C x G blocks of x^T instead of
    Gx1 groups, one scale per tile into scales [C/BLOCK_C, M_pad/G] row-major (the block layout)."""
    _tokens_t_program(tl.program_id(0), tl.program_id(1), x_ptr, s_in_ptr, q_ptr, s_ptr, M, C, M_pad, stride_xm,
                      stride_sig, G, G_IN, PACK, BLOCK_SUB, BLOCK_C, CHUNKS, VEC, DEQUANT, BLOCK_SCALE, EVEN_M, EVEN_C,
                      IEEE_DIV, HW_PACK, FMAX, RFMAX, MBITS, EMIN, POW2, EXACT_ROUND)


@triton.jit
def _tokens_t_program(pid_t, pid_c, x_ptr, s_in_ptr, q_ptr, s_ptr, M, C, M_pad, stride_xm, stride_sig,
                      G: tl.constexpr, G_IN: tl.constexpr, PACK: tl.constexpr, BLOCK_SUB: tl.constexpr,
                      BLOCK_C: tl.constexpr, CHUNKS: tl.constexpr, VEC: tl.constexpr, DEQUANT: tl.constexpr,
                      BLOCK_SCALE: tl.constexpr, EVEN_M: tl.constexpr, EVEN_C: tl.constexpr, IEEE_DIV: tl.constexpr,
                      HW_PACK: tl.constexpr, FMAX: tl.constexpr, RFMAX: tl.constexpr, MBITS: tl.constexpr,
                      EMIN: tl.constexpr, POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """`_tokens_t_kernel`'s program (pid_t, pid_c), shared with the grad-output kernel."""
    tok0 = pid_t * G
    j = tl.arange(0, BLOCK_SUB)
    j_ok = j < G // PACK
    c = tl.arange(0, BLOCK_C)
    cv = _capped(c, VEC)
    even_t: tl.constexpr = BLOCK_SUB * PACK == G
    even: tl.constexpr = EVEN_M and EVEN_C and even_t
    for ch in tl.static_range(CHUNKS):
        col0 = (pid_c * CHUNKS + ch) * BLOCK_C
        col_ok = col0 + c < C
        xb = x_ptr + tok0.to(tl.int64) * stride_xm + col0
        sb = s_in_ptr + tok0 + (col0 // G_IN).to(tl.int64) * stride_sig
        rows = j * PACK
        x0 = _tokens_t_load(xb, sb, rows, cv, j_ok & (tok0 + rows < M), col_ok, stride_xm, stride_sig, col0,
                            G_IN, BLOCK_C, DEQUANT, even)
        a = tl.abs(x0)
        if PACK == 4:
            x1 = _tokens_t_load(xb, sb, rows + 1, cv, j_ok & (tok0 + rows + 1 < M), col_ok, stride_xm,
                                stride_sig, col0, G_IN, BLOCK_C, DEQUANT, even)
            x2 = _tokens_t_load(xb, sb, rows + 2, cv, j_ok & (tok0 + rows + 2 < M), col_ok, stride_xm,
                                stride_sig, col0, G_IN, BLOCK_C, DEQUANT, even)
            x3 = _tokens_t_load(xb, sb, rows + 3, cv, j_ok & (tok0 + rows + 3 < M), col_ok, stride_xm,
                                stride_sig, col0, G_IN, BLOCK_C, DEQUANT, even)
            a = _max_nan(_max_nan(a, tl.abs(x1)), _max_nan(tl.abs(x2), tl.abs(x3)))
        amax = _amax(a, 0)
        if BLOCK_SCALE:  # the tile's amax: one scale, one reciprocal. Columns past C hold 0 times the token's
            amax = _amax(amax, 0)  # input scale: NaN only where that input group's columns in the tile are NaN too
        scale = _scale_from_amax(amax, FMAX, RFMAX, POW2)
        inv = _reciprocal(scale, POW2)
        if BLOCK_SCALE:
            s2 = scale
        else:  # a scale per column, broadcast over the tokens
            s2, inv = scale[None, :], inv[None, :]
        y0 = _quotient(x0, s2, inv, POW2, IEEE_DIV)
        if PACK == 4:
            y1 = _quotient(x1, s2, inv, POW2, IEEE_DIV)
            y2 = _quotient(x2, s2, inv, POW2, IEEE_DIV)
            y3 = _quotient(x3, s2, inv, POW2, IEEE_DIV)
        else:
            y1, y2, y3 = y0, y0, y0
        _store_tokens_t(q_ptr, y0, y1, y2, y3, col0, tok0, c, j, col_ok, j_ok, M_pad, PACK, EVEN_C, even_t,
                        MBITS, EMIN, EXACT_ROUND, HW_PACK)
        if BLOCK_SCALE:
            tl.store(s_ptr + (col0 // BLOCK_C) * (M_pad // G) + pid_t, scale)
        elif EVEN_C:
            tl.store(s_ptr + pid_t * C + col0 + c, scale)
        else:
            tl.store(s_ptr + pid_t * C + col0 + c, scale, mask=col_ok)


@triton.jit
def _grad_output_kernel(x_ptr, qr_ptr, sr_ptr, qt_ptr, st_ptr, M, C, M_pad, stride_xm, col_groups,
                        GR: tl.constexpr, GT: tl.constexpr, BLOCK_GR: tl.constexpr, BLOCK_M: tl.constexpr,
                        ROW_PROGRAMS: tl.constexpr, PACK: tl.constexpr, BLOCK_SUB: tl.constexpr,
                        BLOCK_C: tl.constexpr, TOKEN_PROGRAMS: tl.constexpr, VEC: tl.constexpr,
                        EVEN_M: tl.constexpr, EVEN_C: tl.constexpr, HW_PACK: tl.constexpr,
                        FMAX_R: tl.constexpr, RFMAX_R: tl.constexpr, MBITS_R: tl.constexpr, EMIN_R: tl.constexpr,
                        POW2_R: tl.constexpr, FMAX_T: tl.constexpr, RFMAX_T: tl.constexpr, MBITS_T: tl.constexpr,
                        EMIN_T: tl.constexpr, POW2_T: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Both grad-output operands with one read of dy [M, C] from memory: per [GT tokens, GR columns] region,
    ROW_PROGRAMS consecutive programs run `_rows_kernel`'s programs over its BLOCK_M-row slices (1xGR, for dgrad)
    and the next TOKEN_PROGRAMS run `_tokens_t_kernel`'s over its BLOCK_C-column slices (GTx1 transposed, for
    wgrad). Programs start in order, so a region's two readers run together and the second finds dy in L2;
    each keeps its own kernel's registers, arithmetic and bytes. (One program doing both layouts on a
    register-held tile ran at half the speed of the two kernels: about 240 registers a thread.)"""
    pid = tl.program_id(0)
    region = pid // (ROW_PROGRAMS + TOKEN_PROGRAMS)
    part = pid % (ROW_PROGRAMS + TOKEN_PROGRAMS)
    token_group = region // col_groups
    col_group = region % col_groups
    if part < ROW_PROGRAMS:
        _rows_program(token_group * ROW_PROGRAMS + part, col_group, x_ptr, qr_ptr, sr_ptr, M, C, stride_xm, C, 1, M,
                      GR, BLOCK_GR, BLOCK_M, 1, FMAX_R, RFMAX_R, MBITS_R, EMIN_R, POW2_R, EXACT_ROUND)
    else:
        _tokens_t_program(token_group, col_group * TOKEN_PROGRAMS + part - ROW_PROGRAMS, x_ptr, x_ptr, qt_ptr, st_ptr,
                          M, C, M_pad, stride_xm, 0, GT, 1, PACK, BLOCK_SUB, BLOCK_C, 1, VEC, False, False, EVEN_M,
                          EVEN_C, False, HW_PACK, FMAX_T, RFMAX_T, MBITS_T, EMIN_T, POW2_T, EXACT_ROUND)


@triton.jit
def _blocks_kernel(w_ptr, q_ptr, s_ptr, qt_ptr, st_ptr, N, K, stride_wn, stride_qn, stride_sn, stride_qtk,
                   stride_stk, BR: tl.constexpr, BC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
                   FMAX: tl.constexpr, RFMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
                   POW2: tl.constexpr, EXACT_ROUND: tl.constexpr, TRANSPOSED: tl.constexpr, PACK: tl.constexpr,
                   BLOCK_SUB: tl.constexpr, HW_PACK: tl.constexpr):
    """One program per BRxBC weight block (partial at the edges); TRANSPOSED also writes the block's bytes
    transposed into qt [K, N] and its scale into st [K/BC, N/BR] (dgrad's Q(W)^T, without a second pass).
    PACK = 4 (TRANSPOSED): the block is held as four row-interleaved tiles (rows 4j + i in tile i), so Q(W)^T
    leaves as 32-bit words of four weight rows (`_store_tokens_t`), as the tokens-transposed quantizer's output
    does, instead of a byte transpose through shared memory."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    c = tl.arange(0, BLOCK_C)
    cols = pid_k * BC + c
    col_ok = (c < BC) & (cols < K)
    if PACK == 4:
        row0 = pid_n * BR
        j = tl.arange(0, BLOCK_SUB)
        j_ok = (j < BR // 4) & (row0 + 4 * j < N)
        mask = j_ok[:, None] & col_ok[None, :]
        wb = w_ptr + row0.to(tl.int64) * stride_wn
        w0 = _load_rows(wb, 4 * j, cols, stride_wn, j_ok, col_ok, False)
        w1 = _load_rows(wb, 4 * j + 1, cols, stride_wn, j_ok, col_ok, False)
        w2 = _load_rows(wb, 4 * j + 2, cols, stride_wn, j_ok, col_ok, False)
        w3 = _load_rows(wb, 4 * j + 3, cols, stride_wn, j_ok, col_ok, False)
        a = _max_nan(_max_nan(tl.abs(w0), tl.abs(w1)), _max_nan(tl.abs(w2), tl.abs(w3)))
        scale = _scale_from_amax(_amax(_amax(a, 1), 0), FMAX, RFMAX, POW2)
        inv = _reciprocal(scale, POW2)
        y0 = _quotient(w0, scale, inv, POW2, False)
        y1 = _quotient(w1, scale, inv, POW2, False)
        y2 = _quotient(w2, scale, inv, POW2, False)
        y3 = _quotient(w3, scale, inv, POW2, False)
        qb = q_ptr + row0.to(tl.int64) * stride_qn
        _store_fp8_rows(qb, 4 * j, cols, stride_qn, y0, mask, MBITS, EMIN, EXACT_ROUND)
        _store_fp8_rows(qb, 4 * j + 1, cols, stride_qn, y1, mask, MBITS, EMIN, EXACT_ROUND)
        _store_fp8_rows(qb, 4 * j + 2, cols, stride_qn, y2, mask, MBITS, EMIN, EXACT_ROUND)
        _store_fp8_rows(qb, 4 * j + 3, cols, stride_qn, y3, mask, MBITS, EMIN, EXACT_ROUND)
        _store_tokens_t(qt_ptr, y0, y1, y2, y3, pid_k * BC, row0, c, j, col_ok, j_ok, stride_qtk, 4, False, False,
                        MBITS, EMIN, EXACT_ROUND, HW_PACK)
    else:
        r = tl.arange(0, BLOCK_R)
        rows = (pid_n * BR + r).to(tl.int64)
        mask = ((r < BR) & (rows < N))[:, None] & col_ok[None, :]
        w = tl.load(w_ptr + rows[:, None] * stride_wn + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        scale = _scale_from_amax(_amax(_amax(tl.abs(w), 1), 0), FMAX, RFMAX, POW2)
        y = _quotient(w, scale, _reciprocal(scale, POW2), POW2, False)
        q = _to_fp8(y, q_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND)
        tl.store(q_ptr + rows[:, None] * stride_qn + cols[None, :], q, mask=mask)
        if TRANSPOSED:
            tl.store(qt_ptr + cols.to(tl.int64)[:, None] * stride_qtk + rows[None, :], tl.trans(q),
                     mask=tl.trans(mask))
    tl.store(s_ptr + pid_n * stride_sn + pid_k, scale)
    if TRANSPOSED:
        tl.store(st_ptr + pid_k * stride_stk + pid_n, scale)


@triton.jit
def _amax_partial_kernel(x_ptr, part_ptr, n, BLOCK: tl.constexpr):
    """Per-tensor pass 1: one partial amax per BLOCK elements (NaN if any is NaN; reduced on the device by torch)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(part_ptr + tl.program_id(0), _amax(tl.abs(x), 0))


@triton.jit
def _scaled_cast_kernel(x_ptr, s_ptr, q_ptr, n, BLOCK: tl.constexpr, POW2: tl.constexpr, MBITS: tl.constexpr,
                        EMIN: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Per-tensor pass 2: cast with the one device-resident scale (no host sync)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    scale = tl.load(s_ptr)
    y = _quotient(x, scale, _reciprocal(scale, POW2), POW2, False)
    tl.store(q_ptr + offs, _to_fp8(y, q_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND), mask=mask)


# 1x128 launch config: 64 rows x one 128-group per program, 8 warps. H200 sweeps (triton 3.6, bf16,
# bench/quant.py --sweep): fastest or within 1% at 16384x4096, 8192x14336 and 16384x14336 (77-88% of copy
# bandwidth). Fixed rather than autotuned: no tuning stall when M changes between RL steps, and the result
# never depends on the config (each row's groups are independent). Small M gets 16-row programs so
# decode-sized calls spread over more SMs. Seven others (4-16 rows, 1-4 warps, 1-4 groups) gave the whole
# linear's decode no gain beyond the run's noise on any short row (H200, s27_calls/next_c.sh, 2026-12-05); on
# an H100, 16 rows x 4 groups lost up to 0.19x and 1 or 2 warps gained nothing (s44_calls, 2026-12-06).
_ROWS_CONFIG = {"BLOCK_M": 64, "GROUPS": 1, "num_warps": 8}
_ROWS_CONFIG_SMALL_M = {"BLOCK_M": 16, "GROUPS": 1, "num_warps": 4}
_ROWS_SMALL_M = 2048
_INTERPRET_ROWS = {"BLOCK_M": 8, "GROUPS": 2}
# Tokens-transposed (quantize and re-quantize): one 128-token group x CHUNKS x BLOCK_C columns per program,
# loads VEC elements wide. Chosen by SASS instruction count per element (sm_90, triton 3.9, compiled offline):
# 64 columns, 4 warps, 4-wide loads: 13 instructions per element for bf16 input, 15 for the FP8
# re-quantization (10 with power-of-two scales), against 20 and 46 for the previous kernels, which ran at
# 59-67% and 22-24% of copy on the H200. 2 warps on the same tile take 11 and 12 but 168 registers. (Triton
# 3.6, the GPU image's, gave the shipped configs below 13.5 and 15.1 at 95 registers, and 11.5 and 13.1 at 91 and
# 96 since `_quotient` stops after one correction: `scripts/sass_per_element.py`, the re-quantizer's issue time
# alone 0.96 then 0.83 of a copy's, BENCHMARKS 2026-12-05.) Timed on
# the H200 (2026-12-01, `bench.quant --sweep --only requant,dy`, 8192..16384 x 4096..14336): the re-quantizer
# at 43-51% of copy with fp32 scales (div.rn; the best neighbour, 32 columns and 2 warps, 44-53%) and 67-79%
# with power-of-two scales; no swept neighbour is faster on every shape. On the Markstein division (2026-12-03):
# 56-65% with fp32 scales. Swept again on it (2026-12-04, same command): the re-quantizer's 32 columns at 2 warps
# ran 59.4-68.4% against the 64-column default's 56.3-64.9%, fastest on every shape, so the re-quantizer takes
# them; 32 values per thread (64 columns at 8 warps, 32 at 4, 16 at 2) ran slower everywhere.
_TOKENS_CONFIG = {"BLOCK_C": 64, "CHUNKS": 1, "VEC": 4, "num_warps": 4}
_REQUANT_CONFIG = {"BLOCK_C": 32, "CHUNKS": 1, "VEC": 4, "num_warps": 2}
_INTERPRET_TOKENS = {"BLOCK_C": 64, "CHUNKS": 2, "VEC": 4}
# Grad-output kernel: per [128 tokens, 128 columns] region, the 1x128 programs of BLOCK_M rows, then the
# tokens-transposed programs of BLOCK_C columns. H200 sweep (2026-12-03, `bench.quant --sweep --only "dy "`,
# 8192..16384 x 4096..14336): 64 rows and 64 columns at 4 warps the fastest on every shape, 58.6-64.4% of copy
# against 54.3-60.6% for the two kernels it replaces; 16-row, 128-column and 8-warp programs slower.
_DUAL_CONFIG = {"BLOCK_M": 64, "BLOCK_C": 64, "num_warps": 4}
_BLOCKS_CONFIG = {"num_warps": 8}  # 128x128 weight blocks, one per program
# Blocks re-quantizer: the tokens re-quantizer's program on one whole 128x128 tile (its scale needs the tile's
# amax). Compiled offline for sm_90a (Triton 3.9, `scripts/sass_per_element.py`): 9.9 SASS an element with fp32
# scales at 4 warps (167 registers), 11.8 at 8 (103; the tokens re-quantizer: 13.1). Timed on an H100 (2026-12-06,
# `bench quant --sweep`, 8192..16384 x 4096..14336): 2 warps 62.4-83.2% of copy, 4 warps 62.6-79.3%, 8 warps
# 49.6-59.1%, 16 warps 36.9-42.9%; 2 warps at least as fast on every shape. The interpreter runs the same launch.
_REQUANT_BLOCKS_CONFIG = {"VEC": 4, "num_warps": 2}
_INTERPRET_DUAL = {"BLOCK_M": 32, "BLOCK_C": 64}


# ------------------------------------------------------------------------------------------------ wrappers


@functools.lru_cache(maxsize=None)
def _fmt_args(fmt: QuantFormat, exact_round: bool | None, suffix: str = "") -> dict:
    mbits, emin = _FP8_GRID[fmt.dtype]
    args = {"FMAX": FP8_MAX[fmt.dtype], "RFMAX": _RECIPROCAL_FMAX[fmt.dtype], "MBITS": mbits, "EMIN": emin,
            "POW2": fmt.scale is ScaleKind.POW2}
    args = {name + suffix: value for name, value in args.items()}
    args["EXACT_ROUND"] = TRITON_INTERPRET if exact_round is None else exact_round
    return args


@functools.lru_cache(maxsize=None)
def _hw_pack(device: torch.device) -> bool:
    """Whether `_fp8_word` may issue ``cvt.rn.satfinite.*x2.f32`` (PTX on sm_89 and newer; not the interpreter)."""
    return not TRITON_INTERPRET and torch.cuda.get_device_capability(device) >= (8, 9)


def _rowmajor(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _pow2_block(g: int) -> int:
    return triton.next_power_of_2(g)


def _pack(rows: int) -> int:
    """Rows per packed word of a transposed FP8 store: 4 when the group/block height allows it."""
    return 4 if rows % 4 == 0 else 1


def quantize_rows(x: torch.Tensor, fmt: QuantFormat, *, exact_round: bool | None = None,
                  config: dict | None = None) -> Quantized:
    """1xG along K. `config` ({"BLOCK_M", "GROUPS", "num_warps"}) overrides the launch config (benchmarks)."""
    x = _rowmajor(x)
    m, k = x.shape
    g = fmt.group
    n_groups = -(-k // g)
    out = rows_buffers(m, k, fmt, x.device)
    q, scale = out.data, out.scale
    if m == 0 or k == 0:
        return out
    if config is None:
        config = _INTERPRET_ROWS if TRITON_INTERPRET else _ROWS_CONFIG if m >= _ROWS_SMALL_M else _ROWS_CONFIG_SMALL_M
    grid = (triton.cdiv(m, config["BLOCK_M"]), triton.cdiv(n_groups, config["GROUPS"]))
    _rows_kernel[grid](
        x, q, scale, m, k, x.stride(0), q.stride(0), scale.stride(0), scale.stride(1),
        G=g, BLOCK_G=_pow2_block(g), **_fmt_args(fmt, exact_round), **config,
    )
    return out


def quantize_channel(x: torch.Tensor, fmt: QuantFormat, *, exact_round: bool | None = None) -> Quantized:
    """One scale per row of [R, C]: the rows kernel with a single group spanning the row."""
    x = _rowmajor(x)
    r, c = x.shape
    q = torch.empty((r, c), dtype=fp8_dtype(fmt), device=x.device)
    if r == 0 or c == 0:
        return Quantized(q, scale_from_amax(torch.zeros((r, 1), device=x.device), fmt), fmt)
    scale = torch.empty((r, 1), dtype=torch.float32, device=x.device)
    block_g = _pow2_block(c)
    block_m = max(1, min(16, 4096 // block_g))
    _rows_kernel[(triton.cdiv(r, block_m), 1)](
        x, q, scale, r, c, x.stride(0), q.stride(0), 1, 1,
        G=c, BLOCK_G=block_g, BLOCK_M=block_m, GROUPS=1, **_fmt_args(fmt, exact_round),
        num_warps=8 if block_g >= 4096 else 4,
    )
    return Quantized(q, scale, fmt)


def quantize_blocks(w: torch.Tensor, fmt: QuantFormat, *, exact_round: bool | None = None,
                    out: Quantized | None = None, out_t: Quantized | None = None,
                    config: dict | None = None) -> Quantized:
    """`out`, `out_t`: the data and scale buffers to write (row-strided views allowed), as
    `quantize.quantize_blocks`; `out_t` receives Q(W)^T in the same pass. `config` ({"num_warps"}, optionally
    "maxnreg") overrides the launch config (benchmarks)."""
    w = _rowmajor(w)
    n, k = w.shape
    br, bc = fmt.block
    nb, kb = -(-n // br), -(-k // bc)
    buffers = block_buffers(n, k, fmt, w.device) if out is None else out
    q, scale = buffers.data, buffers.scale
    qt, st = (q, scale) if out_t is None else (out_t.data, out_t.scale)  # qt, st: never written without out_t
    if nb and kb:
        # Q(W)^T as words of four rows where they stay inside qt's rows and 4-byte aligned
        pack = 4 if out_t is not None and br % 4 == 0 and n % 4 == 0 and qt.stride(0) % 4 == 0 \
            and qt.data_ptr() % 4 == 0 else 1
        _blocks_kernel[(nb, kb)](
            w, q, scale, qt, st, n, k, w.stride(0), q.stride(0), scale.stride(0), qt.stride(0), st.stride(0),
            BR=br, BC=bc, BLOCK_R=_pow2_block(br), BLOCK_C=_pow2_block(bc), **_fmt_args(fmt, exact_round),
            TRANSPOSED=out_t is not None, PACK=pack, BLOCK_SUB=_pow2_block(br // 4), HW_PACK=_hw_pack(w.device),
            **(config or _BLOCKS_CONFIG),
        )
    return Quantized(q, scale, fmt)


def _launch_tokens_t(x: torch.Tensor, s_in: torch.Tensor | None, g_in: int, fmt: QuantFormat, config: dict,
                     exact_round: bool | None, ieee_div: bool) -> Quantized:
    """x^T in fmt's Gx1 groups along tokens, or in its blocks (BLOCK_C x G tiles of x^T, one scale each)."""
    m, c = x.shape
    block_scale = fmt.granularity is Granularity.BLOCK
    if block_scale:
        g = fmt.block[1]
        out = blocks_t_buffers(m, c, fmt, x.device)
        q, scale = out.data, out.scale
    else:
        g = fmt.group
        out = tokens_buffers(m, c, fmt, x.device)
        q, scale = out.data, out.scale.t()  # the kernel writes scales [M_pad/G, C] row-major
    if q.numel():
        config = dict(config)
        block_c, chunks = config["BLOCK_C"], config["CHUNKS"]
        pack = _pack(g)
        dequant = s_in is not None
        _tokens_t_kernel[(q.shape[1] // g, triton.cdiv(c, block_c * chunks))](
            x, s_in if dequant else x, q, scale, m, c, q.shape[1], x.stride(0),
            s_in.stride(1) if dequant else 0,
            G=g, G_IN=g_in, PACK=pack, BLOCK_SUB=_pow2_block(g // pack), DEQUANT=dequant, BLOCK_SCALE=block_scale,
            EVEN_M=m % g == 0, EVEN_C=c % (block_c * chunks) == 0, IEEE_DIV=ieee_div, HW_PACK=_hw_pack(x.device),
            **_fmt_args(fmt, exact_round), **config,
            # The re-quantizer multiplies in the kernel before it divides; no contraction may touch that product.
            **({"enable_fp_fusion": False} if dequant and not TRITON_INTERPRET else {}),
        )
    return out


def quantize_tokens_transposed(x: torch.Tensor, fmt: QuantFormat, *, exact_round: bool | None = None,
                               config: dict | None = None) -> Quantized:
    """Gx1 along tokens, transposed. `config` ({"BLOCK_C", "CHUNKS", "VEC", "num_warps"}) is for benchmarks."""
    config = config or (_INTERPRET_TOKENS if TRITON_INTERPRET else _TOKENS_CONFIG)
    return _launch_tokens_t(_rowmajor(x), None, 1, fmt, config, exact_round, False)


def requantize_tokens_transposed(q_in: Quantized, fmt: QuantFormat, *, exact_round: bool | None = None,
                                 config: dict | None = None, ieee_div: bool = False) -> Quantized:
    """Saved 1xG FP8 activation -> tokens-transposed operand, dequantized in registers (one kernel).

    It divides as every quantizer here does (`_quotient`'s FMA correction). That form once gave wrong bytes here
    on the H200 (2026-12-01), so this kernel divided with ``div.rn`` until the cause was found (2026-12-03):
    every wrong byte was a -0 turned +0 by Triton's `0 - x` negation, which the saved activation's FP8 zeros
    bring in by the thousand (bf16 inputs rarely hold a -0). `ieee_div`: div.rn instead (`bench.quant --sweep`).
    `config` as for quantize_tokens_transposed."""
    if q_in.scale.stride(0) != 1:
        raise OperandError("requantize_tokens_transposed needs M-major input scales (strides (1, M))")
    config = config or (_INTERPRET_TOKENS if TRITON_INTERPRET else _REQUANT_CONFIG)
    return _launch_tokens_t(_rowmajor(q_in.data), q_in.scale, q_in.fmt.group, fmt, config, exact_round, ieee_div)


def requantizes_blocks(q_in: Quantized, fmt: QuantFormat) -> bool:
    """Whether `requantize_blocks_transposed` takes q_in to fmt: 1x128 input groups along K with M-major scales,
    128x128 output blocks (a program's 128 columns are then one input group: one input scale per token)."""
    return (q_in.fmt.granularity is Granularity.GROUP and q_in.fmt.axis is Axis.K and q_in.fmt.group == 128
            and fmt.granularity is Granularity.BLOCK and fmt.block == (128, 128) and q_in.scale.stride(0) == 1)


def requantize_blocks_transposed(q_in: Quantized, fmt: QuantFormat, *, exact_round: bool | None = None,
                                 config: dict | None = None) -> Quantized:
    """Saved 1x128 FP8 activation [M, C] -> x^T [C, M_pad] in 128x128 blocks, the bytes of
    `quantize.requantize_blocks_transposed` in one kernel: the tokens re-quantizer's program with BLOCK_SCALE, a
    program per 128-token x 128-column tile taking the tile's amax and writing its one scale. `config` ({"VEC",
    "num_warps"}) is for benchmarks."""
    if not requantizes_blocks(q_in, fmt):
        raise OperandError(
            f"requantize_blocks_transposed needs 1x128 input groups with M-major scales (strides (1, M)) and "
            f"128x128 blocks, got {q_in.fmt.describe()} with scale strides {tuple(q_in.scale.stride())} -> "
            f"{fmt.describe()} (hint: quantize.requantize_blocks_transposed takes the reference there)")
    config = {**(config or _REQUANT_BLOCKS_CONFIG), "BLOCK_C": fmt.block[0], "CHUNKS": 1}
    return _launch_tokens_t(_rowmajor(q_in.data), q_in.scale, q_in.fmt.group, fmt, config, exact_round, False)


def quantize_rows_and_tokens_transposed(x: torch.Tensor, rows_fmt: QuantFormat, tokens_fmt: QuantFormat, *,
                                        exact_round: bool | None = None,
                                        config: dict | None = None) -> tuple[Quantized, Quantized]:
    """The grad output's two operands in one launch that reads x from memory once: 1xG along K (dgrad) and Gx1
    tokens-transposed (wgrad), the bytes of quantize_rows and quantize_tokens_transposed. Group sizes that do
    not split into the config's slices take the two kernels. `config`: {"BLOCK_M", "BLOCK_C", "num_warps"}."""
    x = _rowmajor(x)
    m, c = x.shape
    gr, gt = rows_fmt.group, tokens_fmt.group
    config = dict(config or (_INTERPRET_DUAL if TRITON_INTERPRET else _DUAL_CONFIG))
    block_m, block_c = min(config.pop("BLOCK_M"), gt), min(config.pop("BLOCK_C"), gr)
    if gt % block_m or gr % block_c or _pow2_block(block_m) != block_m or _pow2_block(block_c) != block_c:
        return quantize_rows(x, rows_fmt, exact_round=exact_round), \
            quantize_tokens_transposed(x, tokens_fmt, exact_round=exact_round)
    rows_out, tokens_out = rows_buffers(m, c, rows_fmt, x.device), tokens_buffers(m, c, tokens_fmt, x.device)
    q_r, scale_r = rows_out.data, rows_out.scale
    q_t, scale_t = tokens_out.data, tokens_out.scale.t()  # the kernel writes scales [M_pad/G, C] row-major
    if m and c:
        pack = _pack(gt)
        col_groups = triton.cdiv(c, gr)
        programs = (gt // block_m + gr // block_c) * (q_t.shape[1] // gt) * col_groups
        _grad_output_kernel[(programs,)](
            x, q_r, scale_r, q_t, scale_t, m, c, q_t.shape[1], x.stride(0), col_groups,
            GR=gr, GT=gt, BLOCK_GR=_pow2_block(gr), BLOCK_M=block_m, ROW_PROGRAMS=gt // block_m, PACK=pack,
            BLOCK_SUB=_pow2_block(gt // pack), BLOCK_C=block_c, TOKEN_PROGRAMS=gr // block_c,
            VEC=_TOKENS_CONFIG["VEC"],
            EVEN_M=m % gt == 0, EVEN_C=c % gr == 0, HW_PACK=_hw_pack(x.device),  # regions are gr wide
            **{**_fmt_args(rows_fmt, exact_round, "_R"), **_fmt_args(tokens_fmt, exact_round, "_T")}, **config,
        )
    return rows_out, tokens_out


def quantize_tensor(x: torch.Tensor, fmt: QuantFormat, *, exact_round: bool | None = None,
                    block: int = 4096) -> Quantized:
    """Per-tensor: partial amax kernel, an on-device reduce + the reference scale rule, then a cast kernel."""
    flat = x.contiguous().view(-1)
    n = flat.numel()
    q = torch.empty(x.shape, dtype=fp8_dtype(fmt), device=x.device)
    parts = torch.zeros(max(1, triton.cdiv(n, block)), dtype=torch.float32, device=x.device)
    if n:
        _amax_partial_kernel[(parts.numel(),)](flat, parts, n, BLOCK=block)
    scale = scale_from_amax(parts.amax(), fmt)
    if n:
        cast_args = {k: v for k, v in _fmt_args(fmt, exact_round).items() if k in ("POW2", "MBITS", "EMIN",
                                                                                      "EXACT_ROUND")}
        _scaled_cast_kernel[(parts.numel(),)](flat, scale, q.view(-1), n, BLOCK=block, **cast_args)
    return Quantized(q, scale, fmt)


QUANTIZERS = {
    "tensor": quantize_tensor,
    "channel": quantize_channel,
    "rows": quantize_rows,
    "blocks": quantize_blocks,
    "tokens_t": quantize_tokens_transposed,
}
