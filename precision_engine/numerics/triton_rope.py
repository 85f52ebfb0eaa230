"""RoPE in Triton: `rope` (one tensor) and `rope_qk` (q and k in one launch), each a token's heads in one program,
with the bits of torch's `x * cos + rotate_half(x) * sin` in x's dtype. Its gradient is the transposed rotation
of the output gradient in fp32."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from precision_engine.errors import UnsupportedError
from precision_engine.numerics.contract import TRITON_INTERPRET
from precision_engine.numerics.triton_exact import _round_opaque


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, o_ptr, T, H, stride_xb, stride_xt, stride_xh, stride_cb, stride_ct,
                 D: tl.constexpr, BLOCK_H: tl.constexpr, INTERPRET: tl.constexpr):
    """One token (b, t), all H heads: o = r(r(x * cos) + r(rotate_half(x) * sin)), r = rounding to x's dtype.
    Each product of two 16-bit floats is exact in fp32 and the fp32 sum is IEEE's, so the bits are those of
    torch's `x * cos + rotate_half(x) * sin` in x's dtype (three correctly rounded ops). The roundings are
    opaque to the compiler (`_round_opaque`): with plain casts, LLVM narrows the fp32 add of two widened bf16
    values to a native bf16 add (HADD2.BF16/HFMA2.BF16 on sm_90), whose bits are not torch's on the H200."""
    _rope_token(x_ptr, cos_ptr, sin_ptr, o_ptr, tl.program_id(0), T, H, stride_xb, stride_xt, stride_xh, stride_cb,
                stride_ct, H * D, D, BLOCK_H, INTERPRET)


@triton.jit
def _rope_qk_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr, T, HQ, HK, stride_qb, stride_qt, stride_qh,
                    stride_kb, stride_kt, stride_kh, stride_cb, stride_ct, D: tl.constexpr, BLOCK_HQ: tl.constexpr,
                    BLOCK_HK: tl.constexpr, INTERPRET: tl.constexpr):
    """`_rope_kernel` for q and k in one launch: program (bt, 0) rotates token bt of q, (bt, 1) that of k."""
    if tl.program_id(1) == 0:
        _rope_token(q_ptr, cos_ptr, sin_ptr, qo_ptr, tl.program_id(0), T, HQ, stride_qb, stride_qt, stride_qh,
                    stride_cb, stride_ct, HQ * D, D, BLOCK_HQ, INTERPRET)
    else:
        _rope_token(k_ptr, cos_ptr, sin_ptr, ko_ptr, tl.program_id(0), T, HK, stride_kb, stride_kt, stride_kh,
                    stride_cb, stride_ct, HK * D, D, BLOCK_HK, INTERPRET)


@triton.jit
def _rope_token(x_ptr, cos_ptr, sin_ptr, o_ptr, bt, T, H, stride_xb, stride_xt, stride_xh, stride_cb, stride_ct,
                stride_o, D: tl.constexpr, BLOCK_H: tl.constexpr, INTERPRET: tl.constexpr):
    """Token bt = b * T + t of x, H heads, into row bt of o (stride_o elements a row): the rotation
    `_rope_kernel` describes."""
    b = (bt // T).to(tl.int64)
    t = (bt % T).to(tl.int64)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, D)
    half: tl.constexpr = D // 2
    rot_d = (offs_d + half) % D
    sign = tl.where(offs_d < half, -1.0, 1.0)
    mask = offs_h[:, None] < H
    base = x_ptr + b * stride_xb + t * stride_xt + offs_h[:, None].to(tl.int64) * stride_xh
    x_in = tl.load(base + offs_d[None, :], mask=mask, other=0.0)
    dtype = x_in.dtype
    x = x_in.to(tl.float32)
    xr = tl.load(base + rot_d[None, :], mask=mask, other=0.0).to(tl.float32) * sign[None, :]
    c = tl.load(cos_ptr + b * stride_cb + t * stride_ct + offs_d).to(tl.float32)
    s = tl.load(sin_ptr + b * stride_cb + t * stride_ct + offs_d).to(tl.float32)
    a = _round_opaque(x * c[None, :], dtype, INTERPRET).to(tl.float32)
    r = _round_opaque(xr * s[None, :], dtype, INTERPRET).to(tl.float32)
    out = _round_opaque(a + r, dtype, INTERPRET)
    o_offs = bt.to(tl.int64) * stride_o + offs_h[:, None].to(tl.int64) * D + offs_d[None, :]
    tl.store(o_ptr + o_offs, out, mask=mask)


def _rope_launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The kernel launch, no autograd: x [B, T, H, D] -> [B, T, H, D] contiguous."""
    b, t, h, d = x.shape
    x = x if x.stride(-1) == 1 else x.contiguous()
    cos, sin = cos.contiguous(), sin.contiguous()
    out = torch.empty((b, t, h, d), dtype=x.dtype, device=x.device)
    if out.numel():
        _rope_kernel[(b * t,)](x, cos, sin, out, t, h, x.stride(0), x.stride(1), x.stride(2), cos.stride(0),
                               cos.stride(1), D=d, BLOCK_H=triton.next_power_of_2(h), INTERPRET=TRITON_INTERPRET,
                               num_warps=4)
    return out


def _check_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    b, t, h, d = x.shape
    if x.dtype not in (torch.bfloat16, torch.float16) or cos.dtype != x.dtype or sin.dtype != x.dtype \
            or d < 2 or d & (d - 1):
        raise UnsupportedError(f"triton rope takes a bf16/fp16 x with cos/sin of its dtype and a power-of-two "
                               f"head dim, got {x.dtype}, {cos.dtype}, D={d}")
    if cos.shape != (b, t, d) or sin.shape != cos.shape:
        raise ValueError(f"rope: cos {tuple(cos.shape)}, sin {tuple(sin.shape)} must be [B, T, D] = {(b, t, d)}")


class _Rope(torch.autograd.Function):
    """Forward: the kernel, so the trainer's forward rotates with the very bits of the engine's decode. Backward
    (fp32, rounded once; not bitwise): dx = g * cos + rotate_half^T(g * sin), rotate_half^T(u) = cat(u2, -u1)."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _rope_launch(x, cos, sin)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        g = grad.float()
        gs = g * sin.float()[:, :, None]
        half = g.shape[-1] // 2
        dx = g * cos.float()[:, :, None] + torch.cat((gs[..., half:], -gs[..., :half]), dim=-1)
        return dx.to(grad.dtype), None, None


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's apply_rotary_pos_emb for one tensor, one launch: x [B, T, H, D] (any strides with a contiguous last
    dim), cos, sin [B, T, D] in x.dtype -> [B, H, T, D] (a transposed view of [B, T, H, D] memory), the bits of
    `x.transpose(1, 2) * cos[:, None] + rotate_half(x.transpose(1, 2)) * sin[:, None]` in torch.
    Differentiable in x (`_Rope`): the trainer's forward and the engine's decode run the same kernel."""
    _check_rope(x, cos, sin)
    if torch.is_grad_enabled() and x.requires_grad:
        return _Rope.apply(x, cos, sin).transpose(1, 2)
    return _rope_launch(x, cos, sin).transpose(1, 2)


def rope_qk(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rope(q, cos, sin), rope(k, cos, sin)) in one launch, their bits: every program runs `_rope_kernel`'s
    code on one token of q or of k. q [B, T, Hq, D], k [B, T, Hk, D] (views of one fused q/k/v output too).
    With autograd recorded on q or k, the two differentiable `rope` calls run instead (same bits)."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
        return rope(q, cos, sin), rope(k, cos, sin)
    _check_rope(q, cos, sin)
    _check_rope(k, cos, sin)
    b, t, hq, d = q.shape
    hk = k.shape[2]
    q, k = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k))
    cos, sin = cos.contiguous(), sin.contiguous()
    q_out = torch.empty((b, t, hq, d), dtype=q.dtype, device=q.device)
    k_out = torch.empty((b, t, hk, d), dtype=k.dtype, device=k.device)
    if b * t:
        _rope_qk_kernel[(b * t, 2)](
            q, k, cos, sin, q_out, k_out, t, hq, hk, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1),
            k.stride(2), cos.stride(0), cos.stride(1), D=d, BLOCK_HQ=triton.next_power_of_2(hq),
            BLOCK_HK=triton.next_power_of_2(hk), INTERPRET=TRITON_INTERPRET, num_warps=4)
    return q_out.transpose(1, 2), k_out.transpose(1, 2)
