"""Triton kernels that quantize an op's output as they produce it: RMSNorm -> 1xG FP8 and SiLU(gate) * up ->
1xG FP8 (the ops in front of the FP8 linears), the residual add fused into the RMSNorm after it, and the SiLU
product's backward.
`numerics.fused_quant` is the public side.

Each kernel reads its inputs once and writes the op's output and its FP8 bytes and M-major scales, where the
unfused pair reads the output back (RMSNorm on 8B shapes: 5 bytes per element instead of 7; SiLU-mul: 7
instead of 9, plus one launch fewer). The output's bits are the unfused op's and the quantization is
`triton_quant`'s 1xG arithmetic on those bits, so both halves equal the two separate kernels byte for byte:

- `_rms_norm_quant_kernel` (`_rms_norm_quant_row`) runs `triton_norm._rms_norm_row`, the RMSNorm kernel's
  statements, with its block size, warp count and compile options (one program per row, the same reduction
  tree), then reads the row back as [BLOCK_H/G, G] groups for the quantization.
- `_add_rms_norm_kernel` adds the residual first, ``RN(x + y)`` in fp32 as torch's add of two bf16 tensors,
  stores the sum and runs `_rms_norm_quant_row` (the RMSNorm kernel's statements, with or without the
  quantization) on it as read back after a barrier: one launch where the decoder ran torch's add and the norm.
  The norm part compiles to `_rms_norm_kernel`'s float instructions, in order (sm_90 PTX, triton 3.9).
- `_silu_mul_quant_kernel` computes ``invariant.silu(gate) * up`` as torch does on CUDA, one rounding per op:
  ``RN(g / (1 + exp(-g)))`` with libdevice's ``expf`` (what torch's CUDA ``exp`` runs) and IEEE division,
  rounded to the input dtype, then the product rounded to the output dtype. It compiles without FP
  contraction and without libdevice's flush-to-zero (where this Triton has the option), as nvcc builds torch.
  Triton's interpreter has no libdevice; there ``exp`` is numpy's (tests/numerics/test_fused_quant.py checks
  the rest of the arithmetic against numpy's exp, the GPU tests against torch).
- `_silu_mul_backward_kernel` is that product's backward (`fused_quant`'s, and `silu_mul`'s): the gradients
  autograd computes through those ops, op by op in fp32 with the same compile options, written into any two
  row-strided outputs (the halves of a fused gate/up GEMM's gradient): one pass where autograd launched about
  ten on fp32 temporaries.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

from precision_engine.numerics.contract import TRITON_INTERPRET, Quantized, fp8_dtype
from precision_engine.numerics.formats import QuantFormat
from precision_engine.numerics.triton_exact import _round, _round_opaque
from precision_engine.numerics.triton_norm import _rms_norm_row, norm_warps
from precision_engine.numerics.triton_quant import (
    _INTERPRET,
    _amax,
    _fmt_args,
    _quantize_row_groups,
    _quotient,
    _reciprocal,
    _scale_from_amax,
    _to_fp8,
)


@triton.jit
def _rms_norm_quant_row(row, x_ptr, w_ptr, o_ptr, H, stride_x, stride_o, eps, q_ptr, s_ptr, M,
                        BLOCK_H: tl.constexpr, INTERPRET: tl.constexpr, QUANT: tl.constexpr, G: tl.constexpr,
                        FMAX: tl.constexpr, RFMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
                        POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """HF Llama RMSNorm of one row (`triton_norm._rms_norm_row`, as `_rms_norm_kernel` runs it), then with
    QUANT its 1xG quantization."""
    _rms_norm_row(row, x_ptr, w_ptr, o_ptr, H, stride_x, stride_o, eps, BLOCK_H, INTERPRET)
    if QUANT:
        # The row is read back as [groups, G] (the program's own stores, visible after the barrier): nothing
        # below depends on the norm's registers, so it compiles exactly as in `_rms_norm_kernel` (reusing the
        # output in registers changed LLVM's FMA contraction of the sum of squares, and with it the bits).
        tl.debug_barrier()
        g = tl.arange(0, BLOCK_H // G)
        c = tl.arange(0, G)
        cols = g[:, None] * G + c[None, :]
        groups = tl.load(o_ptr + row * stride_o + cols, mask=cols < H, other=0.0).to(tl.float32)
        scale = _scale_from_amax(_amax(tl.abs(groups), 1), FMAX, RFMAX, POW2)
        quotient = _quotient(groups, scale[:, None], _reciprocal(scale, POW2)[:, None], POW2, False)
        tl.store(q_ptr + row * H + cols, _to_fp8(quotient, q_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND),
                 mask=cols < H)
        tl.store(s_ptr + row + g * M, scale, mask=g * G < H)


@triton.jit
def _rms_norm_quant_kernel(x_ptr, w_ptr, o_ptr, H, stride_x, stride_o, eps, q_ptr, s_ptr, M,
                           BLOCK_H: tl.constexpr, INTERPRET: tl.constexpr, G: tl.constexpr,
                           FMAX: tl.constexpr, RFMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
                           POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """RMSNorm of one row with the parameters of `_rms_norm_kernel`, then its 1xG quantization."""
    _rms_norm_quant_row(tl.program_id(0).to(tl.int64), x_ptr, w_ptr, o_ptr, H, stride_x, stride_o, eps, q_ptr,
                        s_ptr, M, BLOCK_H, INTERPRET, True, G, FMAX, RFMAX, MBITS, EMIN, POW2, EXACT_ROUND)


@triton.jit
def _add_rms_norm_kernel(x_ptr, y_ptr, r_ptr, w_ptr, o_ptr, H, stride_x, stride_y, stride_r, stride_o, eps, q_ptr,
                         s_ptr, M, BLOCK_H: tl.constexpr, INTERPRET: tl.constexpr,
                         QUANT: tl.constexpr, G: tl.constexpr, FMAX: tl.constexpr, RFMAX: tl.constexpr,
                         MBITS: tl.constexpr, EMIN: tl.constexpr, POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """r = x + y for one row (torch's add), then `_rms_norm_quant_row` on r as read back from memory."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_H)
    mask = offs < H
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + row * stride_y + offs, mask=mask, other=0.0)
    tl.store(r_ptr + row * stride_r + offs, _add(x, y, r_ptr.dtype.element_ty, INTERPRET), mask=mask)
    # As in `_rms_norm_quant_row`'s quantization: the norm reads r back after the barrier, so it compiles as
    # `_rms_norm_kernel` does on a loaded row, whatever the add left in registers.
    tl.debug_barrier()
    _rms_norm_quant_row(row, r_ptr, w_ptr, o_ptr, H, stride_r, stride_o, eps, q_ptr, s_ptr, M, BLOCK_H, INTERPRET,
                        QUANT, G, FMAX, RFMAX, MBITS, EMIN, POW2, EXACT_ROUND)


@triton.jit
def _add(x, y, dtype: tl.constexpr, INTERPRET: tl.constexpr):
    """torch's x + y in dtype: the fp32 sum of the widened values, rounded to nearest even. The rounding is
    opaque (`_round_opaque`): with a plain cast LLVM narrows widen-add-round to a native bf16 add (HADD2.BF16
    on sm_90, triton 3.9), the instruction whose bits `_rope_kernel` found to differ from torch's."""
    s = x.to(tl.float32) + y.to(tl.float32)
    if dtype != tl.float32:
        s = _round_opaque(s, dtype, INTERPRET)
    return s


@triton.jit
def _silu(g):
    """g / (1 + exp(-g)) in fp32, each op rounded once (invariant.silu before its cast)."""
    if _INTERPRET:
        e = tl.exp(-g)
    else:
        e = libdevice.exp(-g)
    return tl.math.div_rn(g, 1.0 + e)


@triton.jit
def _silu_mul_quant_kernel(g_ptr, u_ptr, h_ptr, q_ptr, s_ptr, M, K, stride_g, stride_u, stride_h,
                           G: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_M: tl.constexpr, GROUPS: tl.constexpr,
                           INTERPRET: tl.constexpr, FMAX: tl.constexpr, RFMAX: tl.constexpr,
                           MBITS: tl.constexpr, EMIN: tl.constexpr, POW2: tl.constexpr,
                           EXACT_ROUND: tl.constexpr):
    """h = silu(gate) * up on BLOCK_M rows x GROUPS 1xG groups, stored, then quantized as `_rows_kernel` does."""
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_ok = rows < M
    offs = tl.arange(0, BLOCK_G)
    for i in tl.static_range(GROUPS):
        group = pid_k * GROUPS + i
        cols = group * G + offs
        mask = row_ok[:, None] & ((offs < G) & (cols < K))[None, :]
        gate = tl.load(g_ptr + rows[:, None] * stride_g + cols[None, :], mask=mask, other=0.0)
        up = tl.load(u_ptr + rows[:, None] * stride_u + cols[None, :], mask=mask, other=0.0)
        s = _round(_silu(gate.to(tl.float32)), gate.dtype, INTERPRET).to(tl.float32)
        h = _round(s * up.to(tl.float32), h_ptr.dtype.element_ty, INTERPRET)
        tl.store(h_ptr + rows[:, None] * stride_h + cols[None, :], h, mask=mask)
        _quantize_row_groups(h.to(tl.float32), q_ptr, s_ptr, rows, row_ok, cols, mask, group, K, K, 1, M,
                             G, FMAX, RFMAX, MBITS, EMIN, POW2, EXACT_ROUND)


@triton.jit
def _silu_mul_backward_kernel(g_ptr, u_ptr, d_ptr, dg_ptr, du_ptr, M, K, stride_g, stride_u, stride_d, stride_dg,
                              stride_du, WANT_G: tl.constexpr, WANT_U: tl.constexpr, BLOCK_M: tl.constexpr,
                              BLOCK_K: tl.constexpr, INTERPRET: tl.constexpr):
    """The gradients of h = invariant.silu(gate) * up for dh on BLOCK_M x BLOCK_K elements, as torch's autograd
    computes them through those ops, one fp32 rounding per op (see `silu_mul_backward`)."""
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows < M)[:, None] & (cols < K)[None, :]
    gate = tl.load(g_ptr + rows[:, None] * stride_g + cols[None, :], mask=mask, other=0.0)
    dh = tl.load(d_ptr + rows[:, None] * stride_d + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    x = gate.to(tl.float32)
    if WANT_U:  # mul's backward: dh * silu(gate) in the product's dtype
        s = _round(_silu(x), gate.dtype, INTERPRET).to(tl.float32)
        du = _round_opaque(dh * s, du_ptr.dtype.element_ty, INTERPRET)
        tl.store(du_ptr + rows[:, None] * stride_du + cols[None, :], du, mask=mask)
    if WANT_G:
        up = tl.load(u_ptr + rows[:, None] * stride_u + cols[None, :], mask=mask, other=0.0)
        t = _round_opaque(dh * up.to(tl.float32), gate.dtype, INTERPRET).to(tl.float32)  # mul's, into silu's dtype
        if _INTERPRET:
            e = tl.exp(-x)
        else:
            e = libdevice.exp(-x)
        den = e + 1.0
        q = tl.math.div_rn(x, den)
        # div's backward: t / den for the numerator, -t * ((x / den) / den) for den; exp's: times e; neg's: minus
        # (0, the term's limit, where e is inf or 0: as invariant.silu's backward)
        via_den = tl.where((e == 0.0) | (e == float("inf")), 0.0, (t * tl.math.div_rn(q, den)) * e)
        dg = _round_opaque(tl.math.div_rn(t, den) + via_den, dg_ptr.dtype.element_ty, INTERPRET)
        tl.store(dg_ptr + rows[:, None] * stride_dg + cols[None, :], dg, mask=mask)


# SiLU-mul launch: the 1x128 quantizer's (64 rows x one group, 8 warps), not timed at that size. Below 2048 rows:
# 8 rows x one group, 4 warps: 3.8 us for 64 rows of the 8B's 14336 where 16 rows took 4.2 (H200, 2026-12-01,
# benchmarks/2026-12-01/s6_sweeps; no tile changes a bit).
_SILU_CONFIG = {"BLOCK_M": 64, "GROUPS": 1, "num_warps": 8}
_SILU_CONFIG_SMALL_M = {"BLOCK_M": 8, "GROUPS": 1, "num_warps": 4}
_SILU_SMALL_M = 2048
_INTERPRET_SILU = {"BLOCK_M": 8, "GROUPS": 2}


# SiLU-mul backward launch: one row x 1024 columns, 4 warps: 0.425 ms on the 8B's packed [8192, 2 x 14336] (H200,
# 2026-12-01, benchmarks/2026-12-01/s8_sweeps; 4 x 512: 0.555, 1 x 2048 with 8 warps: 0.480; every tile the
# same bits).
_SILU_BACKWARD_CONFIG = {"BLOCK_M": 1, "BLOCK_K": 1024, "num_warps": 4}
_INTERPRET_SILU_BACKWARD = {"BLOCK_M": 2, "BLOCK_K": 64}


@functools.lru_cache(maxsize=None)
def _exact_options() -> dict:
    """Compile options that keep the SiLU arithmetic as written: no FP contraction, and libdevice without
    flush-to-zero (an option since triton 3.x; older versions keep their default)."""
    if TRITON_INTERPRET:
        return {}
    from triton.backends.nvidia.compiler import CUDAOptions

    options = {"enable_fp_fusion": False}
    if "enable_reflect_ftz" in CUDAOptions.__dataclass_fields__:
        options["enable_reflect_ftz"] = False
    return options


def _rows_buffers(m: int, k: int, fmt: QuantFormat, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.empty((m, k), dtype=fp8_dtype(fmt), device=device)
    return q, torch.empty((-(-k // fmt.group), m), dtype=torch.float32, device=device).t()


def rms_norm_fits(h: int, fmt: QuantFormat) -> bool:
    """Whether the fused kernel takes rows of length h: power-of-two groups that tile the row's block."""
    g = fmt.group
    return g & (g - 1) == 0 and g <= triton.next_power_of_2(h)


def rms_norm_quantize(x: torch.Tensor, weight: torch.Tensor, eps: float, fmt: QuantFormat, *,
                      exact_round: bool | None = None) -> tuple[torch.Tensor, Quantized]:
    """x [M, H] (row-major rows) -> (rms_norm(x) as `triton_norm.rms_norm`, its 1xG quantization)."""
    m, h = x.shape
    y = torch.empty((m, h), dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    q, scale = _rows_buffers(m, h, fmt, x.device)
    if m and h:
        block = triton.next_power_of_2(h)
        _rms_norm_quant_kernel[(m,)](
            x, weight.contiguous(), y, h, x.stride(0), y.stride(0), eps, q, scale, m,
            BLOCK_H=block, INTERPRET=TRITON_INTERPRET, G=fmt.group, **_fmt_args(fmt, exact_round),
            num_warps=norm_warps(block),
        )
    return y, Quantized(q, scale, fmt)


# `_add_rms_norm_kernel`'s quantization parameters when it quantizes nothing (QUANT=False never reads them).
_NO_QUANT = {"G": 1, "FMAX": 1.0, "RFMAX": 1.0, "MBITS": 3, "EMIN": -6, "POW2": False, "EXACT_ROUND": False}


def add_rms_norm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float,
                 fmt: QuantFormat | None = None, *, exact_round: bool | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor, Quantized | None]:
    """x, y [M, H] (row-major rows, one dtype) -> (x + y as torch adds
    them, rms_norm of that sum as `triton_norm.rms_norm`, with `fmt` its 1xG quantization as
    `rms_norm_quantize`), in one launch."""
    m, h = x.shape
    r = torch.empty((m, h), dtype=x.dtype, device=x.device)
    out = torch.empty((m, h), dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    q, scale = _rows_buffers(m, h, fmt, x.device) if fmt is not None else (out, out)
    if m and h:
        block = triton.next_power_of_2(h)
        quant = _NO_QUANT if fmt is None else {"G": fmt.group, **_fmt_args(fmt, exact_round)}
        _add_rms_norm_kernel[(m,)](
            x, y, r, weight.contiguous(), out, h, x.stride(0), y.stride(0), r.stride(0), out.stride(0), eps, q,
            scale, m, BLOCK_H=block, INTERPRET=TRITON_INTERPRET,
            QUANT=fmt is not None, **quant,
            num_warps=norm_warps(block),
        )
    return r, out, None if fmt is None else Quantized(q, scale, fmt)


def silu_mul_quantize(gate: torch.Tensor, up: torch.Tensor, fmt: QuantFormat, *, exact_round: bool | None = None,
                      config: dict | None = None) -> tuple[torch.Tensor, Quantized]:
    """gate, up [M, K] (row-major rows) -> (invariant.silu(gate) * up, its 1xG quantization)."""
    m, k = gate.shape
    h = torch.empty((m, k), dtype=torch.promote_types(gate.dtype, up.dtype), device=gate.device)
    q, scale = _rows_buffers(m, k, fmt, gate.device)
    if m and k:
        if config is None:
            config = (_INTERPRET_SILU if TRITON_INTERPRET
                      else _SILU_CONFIG if m >= _SILU_SMALL_M else _SILU_CONFIG_SMALL_M)
        grid = (triton.cdiv(m, config["BLOCK_M"]), triton.cdiv(-(-k // fmt.group), config["GROUPS"]))
        _silu_mul_quant_kernel[grid](
            gate, up, h, q, scale, m, k, gate.stride(0), up.stride(0), h.stride(0),
            G=fmt.group, BLOCK_G=triton.next_power_of_2(fmt.group), INTERPRET=TRITON_INTERPRET,
            **_fmt_args(fmt, exact_round), **config, **_exact_options(),
        )
    return h, Quantized(q, scale, fmt)


def silu_mul_backward(gate: torch.Tensor, up: torch.Tensor, grad: torch.Tensor, d_gate: torch.Tensor | None,
                      d_up: torch.Tensor | None) -> None:
    """Write the gradients of h = invariant.silu(gate) * up for dh = `grad` into `d_gate` and `d_up` (None: not
    wanted), all [M, K] with unit column stride and any row stride (column halves of one buffer included).

    The bits are those of autograd through the unfused ops (`invariant.silu`'s backward, then mul's), which
    `fused_quant` used to recompute and differentiate op by op (about ten elementwise launches on fp32
    temporaries): d_up = dh * silu(gate) and t = dh * up rounded to the inputs' dtype (mul's backward), then
    d_gate = t / den + (t * ((gate / den) / den)) * e with e = exp(-gate), den = e + 1, the second term 0 where
    e is inf or 0, each op one IEEE fp32 rounding, rounded once to gate's dtype. No FP contraction, as nvcc
    builds torch's kernels."""
    m, k = gate.shape
    if not (m and k):
        return
    config = _INTERPRET_SILU_BACKWARD if TRITON_INTERPRET else _SILU_BACKWARD_CONFIG
    grid = (triton.cdiv(m, config["BLOCK_M"]), triton.cdiv(k, config["BLOCK_K"]))
    dg, du = (d_gate if d_gate is not None else grad), (d_up if d_up is not None else grad)
    _silu_mul_backward_kernel[grid](
        gate, up, grad, dg, du, m, k, gate.stride(0), up.stride(0), grad.stride(0), dg.stride(0), du.stride(0),
        WANT_G=d_gate is not None, WANT_U=d_up is not None, INTERPRET=TRITON_INTERPRET, **config,
        **_exact_options(),
    )
