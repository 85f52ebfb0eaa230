"""Triton FP8 quantizers: bit-exact twins of the reference in `numerics.quantize` (read its contract first).

One pass over the input per kernel, scales computed in registers, outputs written in the layouts the GEMMs
read directly (1x128 scales M-major, tokens-transposed data [C, M_pad] with (1, C)-strided scales), so no
layout copy follows. Three details make them bit-exact rather than merely close:

- Division is IEEE round-to-nearest: `_div_by_scale` (one correctly rounded reciprocal per group, then FMA
  corrections that give exactly RN(x / scale), by Markstein's theorem) or `tl.math.div_rn`. Plain ``/`` on
  fp32 compiles to PTX ``div.full.f32``, an approximate division that differs from torch's in the last bit
  now and then. ``div.rn`` per element cost ~15 instructions with a branch and made the kernels
  instruction-bound (H200, 1x128 kernel: 68-78% of copy bandwidth with it, 77-88% with `_div_by_scale`).
- amax is an integer max over the bits of ``|x|`` (`_abs_bits`), so the reduction never depends on how a
  float max treats NaN; a NaN or Inf amax then turns the scale into NaN (contract step 3).
- The final fp32 -> fp8 rounding: on the GPU the hardware ``cvt.rn.satfinite`` is round-to-nearest-even
  (checked against torch by tests/numerics/gpu). Triton's CPU interpreter rounds ties and binade carries
  wrongly (e.g. 124.0 -> 64.0 in E4M3, measured with triton 3.9), so with ``EXACT_ROUND`` the kernels first
  round to the FP8 grid in fp32 arithmetic (`_round_to_fp8_grid`, exact) and the cast then only sees
  representable values, which every cast maps exactly. EXACT_ROUND is on under the interpreter and can be
  forced on the GPU (``exact_round=True``) where the GPU tests compare both paths.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from precision_engine.numerics.formats import FP8_MAX, DType, QuantFormat, ScaleKind
from precision_engine.numerics.contract import Quantized, fp8_dtype, scale_from_amax

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

# Mantissa bits and smallest normal exponent of each FP8 type: the grid _round_to_fp8_grid rounds onto.
_FP8_GRID = {DType.FLOAT8_E4M3: (3, -6), DType.FLOAT8_E5M2: (2, -14)}


# ---------------------------------------------------------------------------------------- shared device code


@triton.jit
def _abs_bits(x):
    """|x| as int32 bits. Their integer order is the float order of |x| with every finite < Inf < NaN, so an
    integer max is a NaN-aware amax in two instructions (no compare-and-select, no NaN-sensitive float max): a
    group holding NaN gets a NaN amax, one holding only Inf an Inf amax, and both then get a NaN scale."""
    return x.to(tl.int32, bitcast=True) & 0x7FFFFFFF


@triton.jit
def _as_float(bits):
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _scale_from_amax(amax, FMAX: tl.constexpr, POW2: tl.constexpr):
    """Contract steps 2-3 (see quantize.scale_from_amax)."""
    scale = tl.math.div_rn(tl.maximum(amax, 1e-10), FMAX)
    if POW2:
        bits = scale.to(tl.int32, bitcast=True)
        exponent = bits & 0x7F800000
        bits = tl.where((bits & 0x007FFFFF) != 0, exponent + 0x00800000, exponent)
        scale = bits.to(tl.float32, bitcast=True)
    return tl.where(amax < float("inf"), scale, float("nan"))  # NaN < inf is false too


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
def _div_by_scale(x, scale):
    """x / scale rounded to nearest (IEEE), with one division per scale instead of one per element.

    ``div.rn.f32`` per element costs a reciprocal, four FMAs and a range check that branches to a slow path
    (about 15 instructions, measured in the SASS): it made the quantizers instruction-bound. Here
    inv = RN(1/scale) is computed once per group; x * inv is within 2 ulps of x/scale, one correction step
    brings it within 1 ulp, and by Markstein's theorem (inv correctly rounded, q within 1 ulp, FMA remainder
    exact) the second correction gives exactly RN(x / scale). The theorem assumes no underflow: quotients
    below 2**-126 can differ in the last fp32 bits, but those are under 2**-20 and round to a signed FP8 zero
    either way (checked on 2e8 pairs, every finite bf16 x included, against IEEE division). The remainder is
    formed as scale*q - x so that x = -0 keeps its sign. NaN scales stay NaN.
    """
    inv = tl.math.div_rn(tl.zeros_like(scale) + 1.0, scale)
    q = x * inv
    rem = tl.fma(scale, q, -x)
    q = tl.fma(-rem, inv, q)
    rem = tl.fma(scale, q, -x)
    return tl.fma(-rem, inv, q)


@triton.jit
def _cast_to_fp8(x, scale, out_ty: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr, EXACT_ROUND: tl.constexpr,
                 IEEE_DIV: tl.constexpr = False):
    """Contract step 4: fp8_rne(clamp(x / scale, +-fmax)), NaN propagated.

    No explicit clamp: `scale` always comes from the amax of the very values being cast, so
    |x / scale| <= RN(amax / RN(amax / fmax)) <= fmax + 1 fp32 ulp, which FP8 round-to-nearest-even maps to
    fmax anyway (the next FP8 magnitude is far away); the hardware cast also saturates (``satfinite``, which
    PTX requires for FP8). NaN stays NaN on both paths.

    IEEE_DIV uses ``div.rn`` per element instead of `_div_by_scale`, for x computed in the kernel (the
    requantizer's q_in * s_in): its ``mul.f32`` may be contracted by ptxas into the FMA that forms the
    remainder, which then is no longer exact (seen on an H200: requantized bytes differed from the reference
    with `_div_by_scale`, and only for non-power-of-two scales, where the remainder is not zero; contraction
    is the suspected cause, not yet confirmed).
    """
    if IEEE_DIV:
        y = tl.math.div_rn(x, scale)
    else:
        y = _div_by_scale(x, scale)
    if EXACT_ROUND:
        y = _round_to_fp8_grid(y, MBITS, EMIN)
    return y.to(out_ty, fp_downcast_rounding="rtne")


# ------------------------------------------------------------------------------------------------ kernels


@triton.jit
def _rows_kernel(x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_qm, stride_sm, stride_sg,
                 G: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_M: tl.constexpr, GROUPS: tl.constexpr,
                 FMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr, POW2: tl.constexpr,
                 EXACT_ROUND: tl.constexpr):
    """1xG groups along K: one program owns BLOCK_M rows x GROUPS consecutive groups (unrolled, so their
    loads are all in flight together). Also per-channel, with G = K and GROUPS = 1."""
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_ok = rows < M
    offs = tl.arange(0, BLOCK_G)
    for i in tl.static_range(GROUPS):
        group = pid_k * GROUPS + i
        cols = group * G + offs
        mask = row_ok[:, None] & ((offs < G) & (cols < K))[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        scale = _scale_from_amax(_as_float(tl.max(_abs_bits(x), axis=1)), FMAX, POW2)
        q = _cast_to_fp8(x, scale[:, None], q_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND)
        tl.store(q_ptr + rows[:, None] * stride_qm + cols[None, :], q, mask=mask)
        # `0 * rows` broadcasts the group test to a tensor: the interpreter rejects tensor & scalar masks.
        tl.store(s_ptr + rows * stride_sm + group * stride_sg, scale, mask=row_ok & (group * G + 0 * rows < K))


@triton.jit
def _load_tile(x_ptr, rows, row_ok, cols, col_ok, stride_xm):
    """x[rows, cols] in fp32, 0 outside the tensor."""
    mask = row_ok[:, None] & col_ok[None, :]
    return tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _fp8_bits(q):
    return q.to(tl.uint8, bitcast=True).to(tl.uint32)


@triton.jit
def _store_transposed(q_ptr, q0, q1, q2, q3, cols, col_ok, j, rows_ok, row0, pitch, PACK: tl.constexpr,
                      EVEN_ROWS: tl.constexpr):
    """Store FP8 tiles q_i [SUB, BLOCK_C] (row r = row0 + PACK * j + i of the tile, i < PACK) transposed, into
    q [C, pitch] at q[col, r]. With PACK = 4 the bytes of rows 4j..4j+3 are first packed into one uint32 (all
    in the same thread, since the four tiles share a layout), so the transpose through shared memory moves
    32-bit words, not single bytes (the byte transpose measured 1.5 TB/s), and the global stores are 16-byte
    vectors along the output rows. EVEN_ROWS drops the mask along the contiguous axis, which would otherwise
    split those stores."""
    if PACK == 4:
        words = _fp8_bits(q0) | (_fp8_bits(q1) << 8) | (_fp8_bits(q2) << 16) | (_fp8_bits(q3) << 24)
        ptr = q_ptr.to(tl.pointer_type(tl.uint32))
    else:
        words = q0
        ptr = q_ptr
    offs = cols[:, None] * (pitch // PACK) + (row0 // PACK + j)[None, :]
    if EVEN_ROWS:
        tl.store(ptr + offs, tl.trans(words), mask=col_ok[:, None])
    else:
        tl.store(ptr + offs, tl.trans(words), mask=col_ok[:, None] & rows_ok[None, :])


@triton.jit
def _tokens_t_quantize(x0, x1, x2, x3, a, q_ptr, s_ptr, cols, col_ok, j, sub_ok, pid_t, C, M_pad,
                       G: tl.constexpr, PACK: tl.constexpr, EVEN_ROWS: tl.constexpr, FMAX: tl.constexpr,
                       MBITS: tl.constexpr, EMIN: tl.constexpr, POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Gx1 quantization of one token group (the PACK row-interleaved tiles x_i, |bits| max-combined in `a`):
    column scales into row pid_t of the [M_pad/G, C] scale buffer, FP8 data transposed into q [C, M_pad].
    Padding tokens [M, M_pad) were loaded as 0 and are written as FP8 zeros, as the contract requires."""
    scale = _scale_from_amax(_as_float(tl.max(a, axis=0)), FMAX, POW2)
    q0 = _cast_to_fp8(x0, scale[None, :], q_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND)
    if PACK == 4:
        q1 = _cast_to_fp8(x1, scale[None, :], q_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND)
        q2 = _cast_to_fp8(x2, scale[None, :], q_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND)
        q3 = _cast_to_fp8(x3, scale[None, :], q_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND)
    else:
        q1, q2, q3 = q0, q0, q0
    _store_transposed(q_ptr, q0, q1, q2, q3, cols, col_ok, j, sub_ok, pid_t * G, M_pad, PACK, EVEN_ROWS)
    tl.store(s_ptr + pid_t * C + cols, scale, mask=col_ok)


@triton.jit
def _tokens_t_kernel(x_ptr, q_ptr, s_ptr, M, C, M_pad, stride_xm, G: tl.constexpr, PACK: tl.constexpr,
                     BLOCK_SUB: tl.constexpr, BLOCK_C: tl.constexpr, CHUNKS: tl.constexpr, FMAX: tl.constexpr,
                     MBITS: tl.constexpr, EMIN: tl.constexpr, POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Gx1 groups along tokens, written transposed: q [C, M_pad], scales [M_pad/G, C] (= [C, M_pad/G] with
    strides (1, C)). One program per (token group, CHUNKS x BLOCK_C columns); the group is loaded as PACK
    tiles of G/PACK rows each (tokens 4j+i in tile i), which `_store_transposed` packs into words."""
    pid_t = tl.program_id(0)
    pid_c = tl.program_id(1)
    j = tl.arange(0, BLOCK_SUB)
    sub_ok = j < G // PACK
    toks = (pid_t * G + j * PACK).to(tl.int64)  # tile i holds tokens toks + i
    for ch in tl.static_range(CHUNKS):
        cols = ((pid_c * CHUNKS + ch) * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)
        col_ok = cols < C
        x0 = _load_tile(x_ptr, toks, sub_ok & (toks < M), cols, col_ok, stride_xm)
        a = _abs_bits(x0)
        if PACK == 4:
            x1 = _load_tile(x_ptr, toks + 1, sub_ok & (toks + 1 < M), cols, col_ok, stride_xm)
            x2 = _load_tile(x_ptr, toks + 2, sub_ok & (toks + 2 < M), cols, col_ok, stride_xm)
            x3 = _load_tile(x_ptr, toks + 3, sub_ok & (toks + 3 < M), cols, col_ok, stride_xm)
            a = tl.maximum(tl.maximum(a, _abs_bits(x1)), tl.maximum(_abs_bits(x2), _abs_bits(x3)))
        else:
            x1, x2, x3 = x0, x0, x0
        _tokens_t_quantize(x0, x1, x2, x3, a, q_ptr, s_ptr, cols, col_ok, j, sub_ok, pid_t, C, M_pad, G, PACK,
                           BLOCK_SUB * PACK == G, FMAX, MBITS, EMIN, POW2, EXACT_ROUND)


@triton.jit
def _requant_tokens_t_kernel(x_ptr, s_in_ptr, q_ptr, s_ptr, M, C, M_pad, stride_xm, stride_sim, stride_sig,
                             G: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_C: tl.constexpr, G_IN: tl.constexpr,
                             FMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr, POW2: tl.constexpr,
                             EXACT_ROUND: tl.constexpr):
    """Saved 1xG_IN FP8 activation -> Gx1 tokens-transposed operand in one pass: x = q_in * s_in in fp32 (as
    `dequantize`), then the tokens-transposed quantization, one program per (token group, BLOCK_C columns).

    Still the first kernel's plain layout (byte-wise transposed stores, IEEE division per element): the packed
    layout of `_tokens_t_kernel` with `_div_by_scale` gave wrong bytes here on an H200 (see `_cast_to_fp8`),
    and a packed version with IEEE division has not yet been run on a GPU."""
    pid_g = tl.program_id(0)
    pid_c = tl.program_id(1)
    t = tl.arange(0, BLOCK_G)
    toks = (pid_g * G + t).to(tl.int64)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < C
    tok_ok = (t < G) & (toks < M)
    mask = tok_ok[:, None] & col_ok[None, :]
    x = tl.load(x_ptr + toks[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if G_IN % BLOCK_C == 0:  # the column block lies inside one input group: one scale per token
        s_in = tl.load(s_in_ptr + toks * stride_sim + (pid_c * BLOCK_C // G_IN) * stride_sig, mask=tok_ok, other=1.0)
        x = x * s_in[:, None]
    else:
        s_in = tl.load(s_in_ptr + toks[:, None] * stride_sim + (cols // G_IN)[None, :] * stride_sig, mask=mask,
                       other=1.0)
        x = x * s_in
    scale = _scale_from_amax(_as_float(tl.max(_abs_bits(x), axis=0)), FMAX, POW2)
    q = _cast_to_fp8(x, scale[None, :], q_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND, IEEE_DIV=True)
    tl.store(q_ptr + cols[None, :].to(tl.int64) * M_pad + toks[:, None], q, mask=(t < G)[:, None] & col_ok[None, :])
    tl.store(s_ptr + pid_g * C + cols, scale, mask=col_ok)


@triton.jit
def _rows_part(x, a, q_ptr, s_ptr, toks, tok_ok, cols, col_ok, group, M, C, GR: tl.constexpr, FMAX: tl.constexpr,
               MBITS: tl.constexpr, EMIN: tl.constexpr, POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """The 1xGR half of the fused grad-output kernel on one [tokens, GR] tile: `_rows_kernel`'s arithmetic."""
    scale = _scale_from_amax(_as_float(tl.max(a, axis=1)), FMAX, POW2)
    q = _cast_to_fp8(x, scale[:, None], q_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND)
    tl.store(q_ptr + toks[:, None] * C + cols[None, :], q, mask=tok_ok[:, None] & col_ok[None, :])
    # `0 * toks` broadcasts the group test to a tensor: the interpreter rejects tensor & scalar masks.
    tl.store(s_ptr + toks + group * M, scale, mask=tok_ok & (group * GR + 0 * toks < C))


@triton.jit
def _rows_and_tokens_t_kernel(x_ptr, qr_ptr, sr_ptr, qt_ptr, st_ptr, M, C, M_pad, stride_xm,
                              GR: tl.constexpr, GT: tl.constexpr, PACK: tl.constexpr, BLOCK_R: tl.constexpr,
                              BLOCK_SUB: tl.constexpr, CHUNKS: tl.constexpr,
                              FMAX_R: tl.constexpr, MBITS_R: tl.constexpr, EMIN_R: tl.constexpr,
                              POW2_R: tl.constexpr, FMAX_T: tl.constexpr, MBITS_T: tl.constexpr,
                              EMIN_T: tl.constexpr, POW2_T: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Both grad-output layouts from one read of dy [M, C]: per [GT, GR] tile the row amax gives the 1xGR
    operand (data [M, C], scales [M, C/GR] M-major, for dgrad) and the column amax the GTx1 tokens-transposed
    operand (data [C, M_pad], scales [M_pad/GT, C], for wgrad). Each half is the same arithmetic as the rows
    and tokens-transposed kernels, so the bytes equal the two separate quantizers'."""
    pid_t = tl.program_id(0)
    pid_c = tl.program_id(1)
    j = tl.arange(0, BLOCK_SUB)
    sub_ok = j < GT // PACK
    toks = (pid_t * GT + j * PACK).to(tl.int64)
    c = tl.arange(0, BLOCK_R)
    for ch in tl.static_range(CHUNKS):
        group = pid_c * CHUNKS + ch
        cols = (group * GR + c).to(tl.int64)
        col_ok = (c < GR) & (cols < C)
        ok0 = sub_ok & (toks < M)
        x0 = _load_tile(x_ptr, toks, ok0, cols, col_ok, stride_xm)
        a0 = _abs_bits(x0)
        _rows_part(x0, a0, qr_ptr, sr_ptr, toks, ok0, cols, col_ok, group, M, C, GR, FMAX_R, MBITS_R, EMIN_R,
                   POW2_R, EXACT_ROUND)
        if PACK == 4:
            ok1 = sub_ok & (toks + 1 < M)
            x1 = _load_tile(x_ptr, toks + 1, ok1, cols, col_ok, stride_xm)
            a1 = _abs_bits(x1)
            _rows_part(x1, a1, qr_ptr, sr_ptr, toks + 1, ok1, cols, col_ok, group, M, C, GR, FMAX_R, MBITS_R,
                       EMIN_R, POW2_R, EXACT_ROUND)
            ok2 = sub_ok & (toks + 2 < M)
            x2 = _load_tile(x_ptr, toks + 2, ok2, cols, col_ok, stride_xm)
            a2 = _abs_bits(x2)
            _rows_part(x2, a2, qr_ptr, sr_ptr, toks + 2, ok2, cols, col_ok, group, M, C, GR, FMAX_R, MBITS_R,
                       EMIN_R, POW2_R, EXACT_ROUND)
            ok3 = sub_ok & (toks + 3 < M)
            x3 = _load_tile(x_ptr, toks + 3, ok3, cols, col_ok, stride_xm)
            a3 = _abs_bits(x3)
            _rows_part(x3, a3, qr_ptr, sr_ptr, toks + 3, ok3, cols, col_ok, group, M, C, GR, FMAX_R, MBITS_R,
                       EMIN_R, POW2_R, EXACT_ROUND)
            a0 = tl.maximum(tl.maximum(a0, a1), tl.maximum(a2, a3))
        else:
            x1, x2, x3 = x0, x0, x0
        _tokens_t_quantize(x0, x1, x2, x3, a0, qt_ptr, st_ptr, cols, col_ok, j, sub_ok, pid_t, C, M_pad, GT, PACK,
                           BLOCK_SUB * PACK == GT, FMAX_T, MBITS_T, EMIN_T, POW2_T, EXACT_ROUND)


@triton.jit
def _blocks_kernel(w_ptr, q_ptr, s_ptr, N, K, stride_wn, stride_qn, stride_sn,
                   BR: tl.constexpr, BC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
                   FMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr, POW2: tl.constexpr,
                   EXACT_ROUND: tl.constexpr):
    """One program per BRxBC weight block (partial at the edges)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    r = tl.arange(0, BLOCK_R)
    c = tl.arange(0, BLOCK_C)
    rows = (pid_n * BR + r).to(tl.int64)
    cols = pid_k * BC + c
    mask = ((r < BR) & (rows < N))[:, None] & ((c < BC) & (cols < K))[None, :]
    w = tl.load(w_ptr + rows[:, None] * stride_wn + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    scale = _scale_from_amax(_as_float(tl.max(tl.max(_abs_bits(w), axis=1), axis=0)), FMAX, POW2)
    q = _cast_to_fp8(w, scale, q_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND)
    tl.store(q_ptr + rows[:, None] * stride_qn + cols[None, :], q, mask=mask)
    tl.store(s_ptr + pid_n * stride_sn + pid_k, scale)


@triton.jit
def _amax_partial_kernel(x_ptr, part_ptr, n, BLOCK: tl.constexpr):
    """Per-tensor pass 1: one partial amax per BLOCK elements (NaN if any is NaN; reduced on the device by torch)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(part_ptr + tl.program_id(0), _as_float(tl.max(_abs_bits(x), axis=0)))


@triton.jit
def _scaled_cast_kernel(x_ptr, s_ptr, q_ptr, n, BLOCK: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
                        EXACT_ROUND: tl.constexpr):
    """Per-tensor pass 2: cast with the one device-resident scale (no host sync)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    q = _cast_to_fp8(x, tl.load(s_ptr), q_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND)
    tl.store(q_ptr + offs, q, mask=mask)


# 1x128 launch config: 64 rows x one 128-group per program, 8 warps. H200 sweeps (triton 3.6, bf16,
# bench/quant.py --sweep): fastest or within 1% at 16384x4096, 8192x14336 and 16384x14336 both before and after
# `_div_by_scale` (77-88% of copy bandwidth after). Fixed rather than autotuned: no tuning stall when M changes
# between RL steps, and the result never depends on the config (each row's groups are independent). Small M
# gets 16-row programs so decode-sized calls spread over more SMs (not measured yet).
_ROWS_CONFIG = {"BLOCK_M": 64, "GROUPS": 1, "num_warps": 8}
_ROWS_CONFIG_SMALL_M = {"BLOCK_M": 16, "GROUPS": 1, "num_warps": 4}
_ROWS_SMALL_M = 2048
_INTERPRET_ROWS = {"BLOCK_M": 8, "GROUPS": 2}
# Tokens-transposed: one 128-token group x CHUNKS x BLOCK_C columns per program. The H200 sweep (same run) put
# 32 columns x 1 chunk x 2 warps first at all four activation shapes (59-67% of copy; 64x1x4 56-64%, 128-column
# tiles 44-52%). Fused grad-output kernel: 1 chunk (one 1x128 group) per program; 8 warps were 5-8% faster
# than 16 there, both far behind the two separate kernels (see `quantize_rows_and_tokens_transposed`).
_TOKENS_CONFIG = {"BLOCK_C": 32, "CHUNKS": 1, "num_warps": 2}
_DUAL_CONFIG = {"CHUNKS": 1, "num_warps": 8}
_INTERPRET_TOKENS = {"BLOCK_C": 64, "CHUNKS": 2}
_REQUANT_BLOCK_C = 64  # the first kernel's config
_INTERPRET_DUAL = {"CHUNKS": 2}


# ------------------------------------------------------------------------------------------------ wrappers


@functools.lru_cache(maxsize=None)
def _fmt_args(fmt: QuantFormat, exact_round: bool | None, suffix: str = "") -> dict:
    mbits, emin = _FP8_GRID[fmt.dtype]
    args = {"FMAX": FP8_MAX[fmt.dtype], "MBITS": mbits, "EMIN": emin, "POW2": fmt.scale is ScaleKind.POW2}
    args = {name + suffix: value for name, value in args.items()}
    args["EXACT_ROUND"] = INTERPRET if exact_round is None else exact_round
    return args


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
    q = torch.empty((m, k), dtype=fp8_dtype(fmt), device=x.device)
    scale = torch.empty((n_groups, m), dtype=torch.float32, device=x.device).t()
    if m == 0 or k == 0:
        return Quantized(q, scale, fmt)
    if config is None:
        config = _INTERPRET_ROWS if INTERPRET else _ROWS_CONFIG if m >= _ROWS_SMALL_M else _ROWS_CONFIG_SMALL_M
    grid = (triton.cdiv(m, config["BLOCK_M"]), triton.cdiv(n_groups, config["GROUPS"]))
    _rows_kernel[grid](
        x, q, scale, m, k, x.stride(0), q.stride(0), scale.stride(0), scale.stride(1),
        G=g, BLOCK_G=_pow2_block(g), **_fmt_args(fmt, exact_round), **config,
    )
    return Quantized(q, scale, fmt)


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


def quantize_blocks(w: torch.Tensor, fmt: QuantFormat, *, exact_round: bool | None = None) -> Quantized:
    w = _rowmajor(w)
    n, k = w.shape
    br, bc = fmt.block
    nb, kb = -(-n // br), -(-k // bc)
    q = torch.empty((n, k), dtype=fp8_dtype(fmt), device=w.device)
    scale = torch.empty((nb, kb), dtype=torch.float32, device=w.device)
    if nb and kb:
        _blocks_kernel[(nb, kb)](
            w, q, scale, n, k, w.stride(0), q.stride(0), scale.stride(0),
            BR=br, BC=bc, BLOCK_R=_pow2_block(br), BLOCK_C=_pow2_block(bc), **_fmt_args(fmt, exact_round),
            num_warps=8,
        )
    return Quantized(q, scale, fmt)


def _tokens_t_buffers(x: torch.Tensor, fmt: QuantFormat) -> tuple[torch.Tensor, torch.Tensor]:
    m, c = x.shape
    m_pad = -(-m // fmt.group) * fmt.group
    q = torch.empty((c, m_pad), dtype=fp8_dtype(fmt), device=x.device)
    return q, torch.empty((m_pad // fmt.group, c), dtype=torch.float32, device=x.device)


def quantize_tokens_transposed(x: torch.Tensor, fmt: QuantFormat, *, exact_round: bool | None = None,
                               config: dict | None = None) -> Quantized:
    """Gx1 along tokens, transposed. `config` ({"BLOCK_C", "CHUNKS", "num_warps"}) is for benchmarks."""
    x = _rowmajor(x)
    m, c = x.shape
    g = fmt.group
    q, scale = _tokens_t_buffers(x, fmt)
    if q.numel():
        config = config or (_INTERPRET_TOKENS if INTERPRET else _TOKENS_CONFIG)
        pack = _pack(g)
        _tokens_t_kernel[(q.shape[1] // g, triton.cdiv(c, config["BLOCK_C"] * config["CHUNKS"]))](
            x, q, scale, m, c, q.shape[1], x.stride(0), G=g, PACK=pack, BLOCK_SUB=_pow2_block(g // pack),
            **_fmt_args(fmt, exact_round), **config,
        )
    return Quantized(q, scale.t(), fmt, tokens=m)


def requantize_tokens_transposed(q_in: Quantized, fmt: QuantFormat, *, exact_round: bool | None = None) -> Quantized:
    """Saved 1xG FP8 activation -> tokens-transposed operand, dequantized in registers (one kernel)."""
    x = q_in.data
    m, c = x.shape
    g = fmt.group
    q, scale = _tokens_t_buffers(x, fmt)
    if q.numel():
        _requant_tokens_t_kernel[(q.shape[1] // g, triton.cdiv(c, _REQUANT_BLOCK_C))](
            x, q_in.scale, q, scale, m, c, q.shape[1], x.stride(0), q_in.scale.stride(0), q_in.scale.stride(1),
            G=g, BLOCK_G=_pow2_block(g), BLOCK_C=_REQUANT_BLOCK_C, G_IN=q_in.fmt.group,
            **_fmt_args(fmt, exact_round), num_warps=8,
        )
    return Quantized(q, scale.t(), fmt, tokens=m)


def quantize_rows_and_tokens_transposed(x: torch.Tensor, rows_fmt: QuantFormat, tokens_fmt: QuantFormat, *,
                                        exact_round: bool | None = None,
                                        config: dict | None = None) -> tuple[Quantized, Quantized]:
    """The grad output's two operands from one read of x: 1xG along K (dgrad) and Gx1 tokens-transposed
    (wgrad), the same bytes as quantize_rows and quantize_tokens_transposed. `config`: {"CHUNKS", "num_warps"}."""
    x = _rowmajor(x)
    m, c = x.shape
    gr, gt = rows_fmt.group, tokens_fmt.group
    m_pad = -(-m // gt) * gt
    q_r = torch.empty((m, c), dtype=fp8_dtype(rows_fmt), device=x.device)
    scale_r = torch.empty((-(-c // gr), m), dtype=torch.float32, device=x.device).t()
    q_t = torch.empty((c, m_pad), dtype=fp8_dtype(tokens_fmt), device=x.device)
    scale_t = torch.empty((m_pad // gt, c), dtype=torch.float32, device=x.device)
    if m and c:
        config = config or (_INTERPRET_DUAL if INTERPRET else _DUAL_CONFIG)
        _rows_and_tokens_t_kernel[(m_pad // gt, triton.cdiv(c, gr * config["CHUNKS"]))](
            x, q_r, scale_r, q_t, scale_t, m, c, m_pad, x.stride(0),
            GR=gr, GT=gt, PACK=_pack(gt), BLOCK_R=_pow2_block(gr), BLOCK_SUB=_pow2_block(gt // _pack(gt)),
            **{**_fmt_args(rows_fmt, exact_round, "_R"), **_fmt_args(tokens_fmt, exact_round, "_T")}, **config,
        )
    return Quantized(q_r, scale_r, rows_fmt), Quantized(q_t, scale_t.t(), tokens_fmt, tokens=m)


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
        cast_args = {k: v for k, v in _fmt_args(fmt, exact_round).items() if k not in ("FMAX", "POW2")}
        _scaled_cast_kernel[(parts.numel(),)](flat, scale, q.view(-1), n, BLOCK=block, **cast_args)
    return Quantized(q, scale, fmt)


QUANTIZERS = {
    "tensor": quantize_tensor,
    "channel": quantize_channel,
    "rows": quantize_rows,
    "blocks": quantize_blocks,
    "tokens_t": quantize_tokens_transposed,
}
