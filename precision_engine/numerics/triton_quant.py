"""Triton FP8 quantizers: bit-exact twins of the reference in `numerics.quantize` (read its contract first).

One pass over the input per kernel, scales computed in registers, outputs written in the layouts the GEMMs
read directly (1x128 scales M-major, tokens-transposed data [C, M_pad] with (1, C)-strided scales), so no
layout copy follows. Three details make them bit-exact rather than merely close:

- Division is `tl.math.div_rn` (IEEE). Plain ``/`` on fp32 compiles to PTX ``div.full.f32``, an approximate
  division that differs from torch's in the last bit now and then.
- amax is taken over ``|x|`` with NaN/Inf replaced by +Inf, so the reduction never depends on how a max
  instruction treats NaN; an Inf amax then turns the scale into NaN (contract step 3). Clamping uses
  NaN-propagating min/max for the same reason.
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
from precision_engine.numerics.quantize import Quantized, fp8_dtype, scale_from_amax

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

# Mantissa bits and smallest normal exponent of each FP8 type: the grid _round_to_fp8_grid rounds onto.
_FP8_GRID = {DType.FLOAT8_E4M3: (3, -6), DType.FLOAT8_E5M2: (2, -14)}


# ---------------------------------------------------------------------------------------- shared device code


@triton.jit
def _safe_abs(x):
    """|x| with NaN and +-Inf mapped to +Inf: a NaN-free amax whose Inf marks a non-finite group."""
    a = tl.abs(x)
    return tl.where(a < float("inf"), a, float("inf"))


@triton.jit
def _scale_from_amax(amax, FMAX: tl.constexpr, POW2: tl.constexpr):
    """Contract steps 2-3 (see quantize.scale_from_amax)."""
    scale = tl.math.div_rn(tl.maximum(amax, 1e-10), FMAX)
    if POW2:
        bits = scale.to(tl.int32, bitcast=True)
        exponent = bits & 0x7F800000
        bits = tl.where((bits & 0x007FFFFF) != 0, exponent + 0x00800000, exponent)
        scale = bits.to(tl.float32, bitcast=True)
    return tl.where(amax < float("inf"), scale, float("nan"))


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
def _cast_to_fp8(x, scale, out_ty: tl.constexpr, FMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
                 EXACT_ROUND: tl.constexpr):
    """Contract step 4: fp8_rne(clamp(x / scale, +-fmax)), NaN propagated."""
    y = tl.math.div_rn(x, scale)
    y = tl.minimum(tl.maximum(y, -FMAX, propagate_nan=tl.PropagateNan.ALL), FMAX, propagate_nan=tl.PropagateNan.ALL)
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
        scale = _scale_from_amax(tl.max(_safe_abs(x), axis=1), FMAX, POW2)
        q = _cast_to_fp8(x, scale[:, None], q_ptr.dtype.element_ty, FMAX, MBITS, EMIN, EXACT_ROUND)
        tl.store(q_ptr + rows[:, None] * stride_qm + cols[None, :], q, mask=mask)
        # `0 * rows` broadcasts the group test to a tensor: the interpreter rejects tensor & scalar masks.
        tl.store(s_ptr + rows * stride_sm + group * stride_sg, scale, mask=row_ok & (group * G + 0 * rows < K))


@triton.jit
def _blocks_kernel(w_ptr, q_ptr, qt_ptr, s_ptr, N, K, stride_wn, stride_qn, stride_qtk, stride_sn,
                   BR: tl.constexpr, BC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
                   TRANSPOSE: tl.constexpr, FMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
                   POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """One program per BRxBC weight block (partial at the edges). With TRANSPOSE the same bytes are also
    stored transposed into qt [K, N] (dgrad's K-major operand), saving the separate transpose kernel."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    r = tl.arange(0, BLOCK_R)
    c = tl.arange(0, BLOCK_C)
    rows = (pid_n * BR + r).to(tl.int64)
    cols = (pid_k * BC + c).to(tl.int64)
    row_ok = (r < BR) & (rows < N)
    col_ok = (c < BC) & (cols < K)
    mask = row_ok[:, None] & col_ok[None, :]
    w = tl.load(w_ptr + rows[:, None] * stride_wn + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    scale = _scale_from_amax(tl.max(tl.max(_safe_abs(w), axis=1), axis=0), FMAX, POW2)
    q = _cast_to_fp8(w, scale, q_ptr.dtype.element_ty, FMAX, MBITS, EMIN, EXACT_ROUND)
    tl.store(q_ptr + rows[:, None] * stride_qn + cols[None, :], q, mask=mask)
    if TRANSPOSE:
        tl.store(qt_ptr + cols[:, None] * stride_qtk + rows[None, :], tl.trans(q), mask=col_ok[:, None] & row_ok[None, :])
    tl.store(s_ptr + pid_n * stride_sn + pid_k, scale)


@triton.jit
def _tokens_t_tile(x, t, toks, cols, col_ok, q_ptr, s_ptr, pid_t, C, M_pad, G: tl.constexpr,
                   BLOCK_T: tl.constexpr, FMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
                   POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Quantize an fp32 tile x [tokens, cols] along tokens and store it transposed: q [C, M_pad] gets
    tl.trans(q_tile), so each column's run of tokens is one contiguous, vectorized store (the tile is
    transposed in shared memory, not by per-byte scattered stores), and the column scales go to row pid_t of
    the [M_pad/G, C] scale buffer. No mask along tokens when G is a power of two (BLOCK_T == G): a mask that
    varies along the contiguous axis would split the store into single bytes. The padding tokens [M, M_pad)
    are loaded as 0 and written as FP8 zeros, as the contract's zero padding requires."""
    scale = _scale_from_amax(tl.max(_safe_abs(x), axis=0), FMAX, POW2)
    q = _cast_to_fp8(x, scale[None, :], q_ptr.dtype.element_ty, FMAX, MBITS, EMIN, EXACT_ROUND)
    if BLOCK_T == G:
        store_mask = col_ok[:, None]
    else:
        store_mask = col_ok[:, None] & (t < G)[None, :]
    tl.store(q_ptr + cols[:, None] * M_pad + toks[None, :], tl.trans(q), mask=store_mask)
    tl.store(s_ptr + pid_t * C + cols, scale, mask=col_ok)


@triton.jit
def _tokens_t_kernel(x_ptr, s_in_ptr, q_ptr, s_ptr, M, C, M_pad, stride_xm, stride_sim, stride_sig,
                     G: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr, CHUNKS: tl.constexpr,
                     G_IN: tl.constexpr,
                     DEQUANT: tl.constexpr, FMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
                     POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Gx1 groups along tokens, written transposed: q [C, M_pad], scales [M_pad/G, C]
    (= [C, M_pad/G] with strides (1, C)). One program per (token group, CHUNKS x BLOCK_C columns), the chunks
    unrolled so their loads are in flight together. With DEQUANT the input is a 1xG_IN FP8 activation
    (x = q_in * s_in in fp32, as `dequantize`), which fuses the wgrad re-quantization."""
    pid_t = tl.program_id(0)
    pid_c = tl.program_id(1)
    t = tl.arange(0, BLOCK_T)
    toks = (pid_t * G + t).to(tl.int64)
    tok_ok = (t < G) & (toks < M)
    for i in tl.static_range(CHUNKS):
        cols = ((pid_c * CHUNKS + i) * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)
        col_ok = cols < C
        mask = tok_ok[:, None] & col_ok[None, :]
        x = tl.load(x_ptr + toks[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if DEQUANT:
            if G_IN % BLOCK_C == 0:  # the chunk lies inside one input group: one scale per token
                group_in = (pid_c * CHUNKS + i) * BLOCK_C // G_IN
                s_in = tl.load(s_in_ptr + toks * stride_sim + group_in * stride_sig, mask=tok_ok, other=1.0)
                x = x * s_in[:, None]
            else:
                s_in = tl.load(s_in_ptr + toks[:, None] * stride_sim + (cols // G_IN)[None, :] * stride_sig,
                               mask=mask, other=1.0)
                x = x * s_in
        _tokens_t_tile(x, t, toks, cols, col_ok, q_ptr, s_ptr, pid_t, C, M_pad, G, BLOCK_T, FMAX, MBITS, EMIN,
                       POW2, EXACT_ROUND)


@triton.jit
def _rows_and_tokens_t_kernel(x_ptr, qr_ptr, sr_ptr, qt_ptr, st_ptr, M, C, M_pad, stride_xm,
                              GR: tl.constexpr, GT: tl.constexpr, BLOCK_R: tl.constexpr,
                              BLOCK_T: tl.constexpr, CHUNKS: tl.constexpr,
                              FMAX_R: tl.constexpr, MBITS_R: tl.constexpr, EMIN_R: tl.constexpr,
                              POW2_R: tl.constexpr, FMAX_T: tl.constexpr, MBITS_T: tl.constexpr,
                              EMIN_T: tl.constexpr, POW2_T: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Both grad-output layouts from one read of dy [M, C]: per [GT, GR] tile the
    row amax gives the 1xGR operand (data [M, C], scales [M, C/GR] M-major, for dgrad) and the column amax the
    GTx1 tokens-transposed operand (data [C, M_pad], scales [M_pad/GT, C], for wgrad). Each half is the same
    arithmetic as `_rows_kernel` / `_tokens_t_kernel`, so the bytes equal the two separate quantizers'."""
    pid_t = tl.program_id(0)
    pid_c = tl.program_id(1)
    t = tl.arange(0, BLOCK_T)
    toks = (pid_t * GT + t).to(tl.int64)
    tok_ok = (t < GT) & (toks < M)
    c = tl.arange(0, BLOCK_R)
    for i in tl.static_range(CHUNKS):
        group = pid_c * CHUNKS + i
        cols = (group * GR + c).to(tl.int64)
        col_ok = (c < GR) & (cols < C)
        mask = tok_ok[:, None] & col_ok[None, :]
        x = tl.load(x_ptr + toks[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        scale_r = _scale_from_amax(tl.max(_safe_abs(x), axis=1), FMAX_R, POW2_R)
        q_r = _cast_to_fp8(x, scale_r[:, None], qr_ptr.dtype.element_ty, FMAX_R, MBITS_R, EMIN_R, EXACT_ROUND)
        tl.store(qr_ptr + toks[:, None] * C + cols[None, :], q_r, mask=mask)
        tl.store(sr_ptr + toks + group * M, scale_r, mask=tok_ok & (group * GR + 0 * toks < C))
        _tokens_t_tile(x, t, toks, cols, col_ok, qt_ptr, st_ptr, pid_t, C, M_pad, GT, BLOCK_T, FMAX_T, MBITS_T,
                       EMIN_T, POW2_T, EXACT_ROUND)


@triton.jit
def _amax_partial_kernel(x_ptr, part_ptr, n, BLOCK: tl.constexpr):
    """Per-tensor pass 1: one partial NaN-free amax per BLOCK elements (reduced on the device by torch)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(part_ptr + tl.program_id(0), tl.max(_safe_abs(x), axis=0))


@triton.jit
def _scaled_cast_kernel(x_ptr, s_ptr, q_ptr, n, BLOCK: tl.constexpr, FMAX: tl.constexpr, MBITS: tl.constexpr,
                        EMIN: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Per-tensor pass 2: cast with the one device-resident scale (no host sync)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    q = _cast_to_fp8(x, tl.load(s_ptr), q_ptr.dtype.element_ty, FMAX, MBITS, EMIN, EXACT_ROUND)
    tl.store(q_ptr + offs, q, mask=mask)


# 1x128 launch config. Measured on an H200 (triton 3.6, bf16, bench/quant.py --sweep over 8 configs): 64 rows x
# one 128-group per program with 8 warps was the fastest (or within 1%) at 16384x4096, 8192x14336 and
# 16384x14336, ~73-79% of copy bandwidth as timed then (host overhead included; 8192x4096 was dominated by it).
# Fixed rather than autotuned: no tuning stall when M changes between RL steps, and the result never depends on
# the config (each row's groups are independent). Small M gets 16-row programs so decode-sized calls spread
# over more SMs (not measured yet).
_ROWS_CONFIG = {"BLOCK_M": 64, "GROUPS": 1, "num_warps": 8}
_ROWS_CONFIG_SMALL_M = {"BLOCK_M": 16, "GROUPS": 1, "num_warps": 4}
_ROWS_SMALL_M = 2048
_INTERPRET_ROWS = {"BLOCK_M": 8, "GROUPS": 2}
_TOKENS_BLOCK_C = 64


# ------------------------------------------------------------------------------------------------ wrappers


@functools.lru_cache(maxsize=None)
def _fmt_args(fmt: QuantFormat, exact_round: bool | None) -> dict:
    mbits, emin = _FP8_GRID[fmt.dtype]
    return {
        "FMAX": FP8_MAX[fmt.dtype],
        "MBITS": mbits,
        "EMIN": emin,
        "EXACT_ROUND": INTERPRET if exact_round is None else exact_round,
    }


def _pow2(fmt: QuantFormat) -> bool:
    return fmt.scale is ScaleKind.POW2


def _rowmajor(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


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
        G=g, BLOCK_G=triton.next_power_of_2(g), POW2=_pow2(fmt), **_fmt_args(fmt, exact_round), **config,
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
    block_g = triton.next_power_of_2(c)
    block_m = max(1, min(16, 4096 // block_g))
    _rows_kernel[(triton.cdiv(r, block_m), 1)](
        x, q, scale, r, c, x.stride(0), q.stride(0), 1, 1,
        G=c, BLOCK_G=block_g, BLOCK_M=block_m, GROUPS=1, POW2=_pow2(fmt), **_fmt_args(fmt, exact_round),
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
            BR=br, BC=bc, BLOCK_R=triton.next_power_of_2(br), BLOCK_C=triton.next_power_of_2(bc),
            POW2=_pow2(fmt), **_fmt_args(fmt, exact_round), num_warps=8,
        )
    return Quantized(q, scale, fmt)


def _tokens_t(x: torch.Tensor, s_in: torch.Tensor | None, g_in: int, fmt: QuantFormat,
              exact_round: bool | None) -> Quantized:
    x = _rowmajor(x)
    m, c = x.shape
    g = fmt.group
    m_pad = -(-m // g) * g
    q = torch.empty((c, m_pad), dtype=fp8_dtype(fmt), device=x.device)
    scale = torch.empty((m_pad // g, c), dtype=torch.float32, device=x.device)
    if m_pad and c:
        dequant = s_in is not None
        _tokens_t_kernel[(m_pad // g, triton.cdiv(c, _TOKENS_BLOCK_C))](
            x, s_in if dequant else x, q, scale, m, c, m_pad, x.stride(0),
            s_in.stride(0) if dequant else 0, s_in.stride(1) if dequant else 0,
            G=g, BLOCK_G=triton.next_power_of_2(g), BLOCK_C=_TOKENS_BLOCK_C, G_IN=g_in, DEQUANT=dequant,
            POW2=_pow2(fmt), **_fmt_args(fmt, exact_round), num_warps=8,
        )
    return Quantized(q, scale.t(), fmt, tokens=m)


def quantize_tokens_transposed(x: torch.Tensor, fmt: QuantFormat, *, exact_round: bool | None = None) -> Quantized:
    return _tokens_t(x, None, 1, fmt, exact_round)


def requantize_tokens_transposed(q_in: Quantized, fmt: QuantFormat, *, exact_round: bool | None = None) -> Quantized:
    """Saved 1xG FP8 activation -> tokens-transposed operand, dequantized in registers (one kernel)."""
    return _tokens_t(q_in.data, q_in.scale, q_in.fmt.group, fmt, exact_round)


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
        _scaled_cast_kernel[(parts.numel(),)](flat, scale, q.view(-1), n, BLOCK=block,
                                              **_fmt_args(fmt, exact_round))
    return Quantized(q, scale, fmt)


QUANTIZERS = {
    "tensor": quantize_tensor,
    "channel": quantize_channel,
    "rows": quantize_rows,
    "blocks": quantize_blocks,
    "tokens_t": quantize_tokens_transposed,
}
