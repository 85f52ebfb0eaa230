"""The batch-invariant RMSNorm (HF Llama's semantics) in Triton: one program per row, a fixed block size and warp
count per row length (`norm_warps`, shared with the fused quantizing and residual-adding norms in
`triton_fused_quant`, which run `_rms_norm_row` too). Its backward is not batch-invariant and need not be: it
recomputes the forward in plain fp32 from the saved inputs and differentiates that."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from precision_engine.numerics.contract import TRITON_INTERPRET
from precision_engine.numerics.triton_exact import _round
from precision_engine.numerics.triton_quant import _rowmajor


def norm_warps(block_h: int) -> int:
    """Warps of every RMSNorm launch (plain, quantizing, residual-adding): the reduction's order depends on
    them, so all use one rule and a row gets the same bits from each. 32 warps from 4096 columns on: a decode
    step's norm of split-K sums, 64 rows of 4 / 8 parts, took 4.5 / 5.5 us where 8 warps took 6.5 / 7.1, and
    8192 plain rows 98.7 us where they took 80.7 (H200, 2026-12-01, fifth session; BENCHMARKS.md)."""
    return 32 if block_h >= 4096 else 4


@triton.jit
def _rms_norm_row(row, x_ptr, w_ptr, o_ptr, H, stride_x, stride_o, eps, BLOCK_H: tl.constexpr,
                  INTERPRET: tl.constexpr):
    """HF Llama on one row: h = (x32 * rsqrt(mean(x32^2) + eps)).to(x.dtype); out = weight * h (torch's
    promotion), stored. Every RMSNorm launch runs these statements (`triton_fused_quant`'s quantizing and
    residual-adding ones too), so a row gets the same bits from each."""
    offs = tl.arange(0, BLOCK_H)
    mask = offs < H
    x_in = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    x = x_in.to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / H + eps)
    h = _round(x * inv, x_in.dtype, INTERPRET).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(o_ptr + row * stride_o + offs, _round(w * h, o_ptr.dtype.element_ty, INTERPRET), mask=mask)


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, o_ptr, H, stride_x, stride_o, eps, BLOCK_H: tl.constexpr,
                     INTERPRET: tl.constexpr):
    """`_rms_norm_row`, one program per row."""
    _rms_norm_row(tl.program_id(0).to(tl.int64), x_ptr, w_ptr, o_ptr, H, stride_x, stride_o, eps, BLOCK_H,
                  INTERPRET)


def _rms_norm_launch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.shape[-1]
    x2 = _rowmajor(x.reshape(-1, h))
    out = torch.empty(x2.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    if x2.shape[0] and h:
        block = triton.next_power_of_2(h)
        _rms_norm_kernel[(x2.shape[0],)](x2, weight.contiguous(), out, h, x2.stride(0), out.stride(0), eps,
                                         BLOCK_H=block, INTERPRET=TRITON_INTERPRET, num_warps=norm_warps(block))
    return out.reshape(x.shape)


def rms_norm_twin(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF LlamaRMSNorm.forward in torch ops (the kernel's bits in the interpreter, tests' reference)."""
    x32 = x.float()
    h = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


@triton.jit
def _rms_norm_backward_kernel(x_ptr, w_ptr, dy_ptr, dx_ptr, dw_ptr, M, H, stride_x, stride_dy, stride_dx, eps,
                              ROWS: tl.constexpr, BLOCK_H: tl.constexpr, INTERPRET: tl.constexpr):
    """Gradients of out = weight * h, h = x * rsqrt(mean(x^2) + eps) rounded to x's dtype, for ROWS rows: dx
    stored per row; the rows' sum of dy * h stored as this program's fp32 partial of dweight."""
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK_H)
    mask = offs < H
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for i in range(ROWS):
        row = pid.to(tl.int64) * ROWS + i
        live = mask & (offs * 0 + row < M)
        x_in = tl.load(x_ptr + row * stride_x + offs, mask=live, other=0.0)
        x = x_in.to(tl.float32)
        dy = tl.load(dy_ptr + row * stride_dy + offs, mask=live, other=0.0).to(tl.float32)
        inv = tl.rsqrt(tl.sum(x * x, axis=0) / H + eps)
        dw += dy * _round(x * inv, x_in.dtype, INTERPRET).to(tl.float32)
        g = _round(dy * w, x_in.dtype, INTERPRET).to(tl.float32)  # mul's backward, in h's dtype
        dx = inv * g - x * (inv * inv * inv * (tl.sum(g * x, axis=0) / H))
        tl.store(dx_ptr + row * stride_dx + offs, _round(dx, dx_ptr.dtype.element_ty, INTERPRET), mask=live)
    tl.store(dw_ptr + pid * H + offs, dw, mask=mask)


RMS_BACKWARD_ROWS = 32  # rows per program: 256 programs and a 4 MB fp32 partial of dweight at 8192 x 4096


def rms_norm_backward(x: torch.Tensor, weight: torch.Tensor, eps: float,
                      grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight) of `rms_norm` for dy = `grad`, in one pass over the rows: each row's statistic recomputed as
    the forward computes it, then dx = inv * g - x * inv^3 * mean(g * x) with g = dy * weight rounded as the
    product's backward rounds it; dweight = the sum over rows of dy * h, per-program fp32 partials added by torch
    (a fixed order: deterministic). Within fp32 rounding of the exact gradient of the forward's arithmetic,
    each rounded once; not bitwise the autograd recomputation through `rms_norm_twin` it replaces (about fifteen
    launches on fp32 temporaries), which nothing compared bits with."""
    h = x.shape[-1]
    x2, g2 = (_rowmajor(t.reshape(-1, h)) for t in (x, grad))
    m = x2.shape[0]
    dx = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    programs = triton.cdiv(m, RMS_BACKWARD_ROWS)
    partial = torch.empty((programs, h), dtype=torch.float32, device=x.device)
    if m and h:
        block = triton.next_power_of_2(h)
        _rms_norm_backward_kernel[(programs,)](
            x2, weight.contiguous(), g2, dx, partial, m, h, x2.stride(0), g2.stride(0), dx.stride(0), eps,
            ROWS=RMS_BACKWARD_ROWS, BLOCK_H=block, INTERPRET=TRITON_INTERPRET, num_warps=norm_warps(block))
    return dx.reshape(x.shape), partial.sum(0).to(weight.dtype)


class _RmsNorm(torch.autograd.Function):
    """Forward: the per-row kernel. Backward: `rms_norm_backward` (not bitwise any other backward)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return _rms_norm_launch(x, weight, eps)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        gx, gw = rms_norm_backward(x, weight, ctx.eps, grad)
        return gx, gw, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim with HF Llama semantics; one program per row."""
    if weight.shape != (x.shape[-1],):
        raise ValueError(f"rms_norm: weight {tuple(weight.shape)} does not fit x {tuple(x.shape)}")
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _RmsNorm.apply(x, weight, eps)
    return _rms_norm_launch(x, weight, eps)
