"""Batch-invariant ops: a row's result never depends on how many rows share the call, their order or padding.

This is what makes the logprobs a rollout records while decoding (one query per sequence against the KV cache,
M = batch rows per GEMM) equal, bit for bit, to the trainer's full-sequence forward (M = batch x length). The
functions below are the pure-torch versions (CPU, and the reference for the GPU kernels); CUDA tensors go to
`numerics.triton_invariant`, which has the same names and signatures.

How the torch versions stay invariant on the CPU (each property is tested bitwise in
tests/numerics/test_invariant.py, on this build of torch):
- GEMMs: a plain fp32 `a @ b.T` is not row-invariant (oneDNN/MKL pick blockings by M). `_tiled_matmul` pads M
  to a multiple of TILE_M and runs one `torch.bmm` over [M/TILE_M, TILE_M, K] tiles: every tile has the same
  shape whatever M is, so a row's dot products follow one order. Inputs are upcast to fp32 (exact) and the
  result rounded once; bf16 bmm is slower than the upcast.
- Elementwise math uses only ops that are position-independent on this CPU (correctly rounded + - * /, and
  exp, rsqrt, log whose vectorised and scalar-tail paths agree); `F.silu` is not (its tail differs), which is
  why the decoder writes silu as x / (1 + exp(-x)).
- Reductions run along a contiguous last dim of a length fixed by the op, never by the batch: rms_norm over H,
  attention over KV_BLOCK-wide blocks, log_softmax over vocab chunks of at most VOCAB_CHUNK (so no single long
  row is ever split across threads, which ATen does for a lone large reduction).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from precision_engine.numerics.contract import Quantized, as_dtype
from precision_engine.numerics.formats import QuantFormat

TILE_M = 16  # rows per GEMM tile: every bmm call sees [*, TILE_M, K] x [*, K, N]
KV_BLOCK = 32  # slots per attention block; both phases reduce over the same blocks in increasing order
VOCAB_CHUNK = 1024  # log_softmax reduces within chunks of this length, then across chunks


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., K] @ weight[N, K]^T (+ bias) in fp32, rounded once to x.dtype."""
    if x.is_cuda:
        triton = _triton()
        if triton is not None:
            return triton.linear(x, weight, bias)
    lead, k = x.shape[:-1], x.shape[-1]
    out = _tiled_matmul(x.reshape(1, -1, k).float(), weight.float().t()[None])[0]
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype).reshape(*lead, weight.shape[0])


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF Llama's RMSNorm: fp32 x * rsqrt(mean(x^2) + eps), cast back to x.dtype, times weight."""
    if x.is_cuda:
        triton = _triton()
        if triton is not None:
            return triton.rms_norm(x, weight, eps)
    x32 = x.float().contiguous()
    variance = (x32 * x32).mean(-1, keepdim=True)
    return weight.to(x.dtype) * (x32 * torch.rsqrt(variance + eps)).to(x.dtype)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    kv_len: torch.Tensor,
    *,
    scale: float,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    quantize: QuantFormat | None = None,
    causal: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, Quantized]:
    """Causal attention over position-indexed keys (slot j holds position j), in q.dtype.

    q [B, Hq, Tq, D]; k, v [B, Hkv, S, D]; q_pos int64 [B, Tq] (-1: a padding query, output 0); kv_len int64 [B].
    Query i of row b sees slots j <= q_pos[b, i] and j < kv_len[b]. Online softmax in fp32 over KV_BLOCK-wide
    blocks in increasing order; blocks a query cannot see are exact no-ops, so a decode step (Tq = 1, S = the
    cache) and a full forward (Tq = S = the sequence) give a query the same bits.

    k / v may be float8_e4m3fn (an FP8 KV cache) with dequant multipliers `k_scale` / `v_scale` of shape [] or
    [Hkv]: each block is dequantized to q.dtype as it is read, `(k.float() * scale).to(q.dtype)`, the bits of
    `numerics.kv_cache.dequantize_kv`, so no step dequantizes more than it attends to.

    `quantize` (a 1xG FP8 format): returns (out, quantize_rows_1xG of out as o_proj reads it, [B * Tq, Hq * D]).
    CUDA tensors with one group per head (`triton_invariant.attention_quantize_fits`) get it from the kernel's
    epilogue, one launch fewer; the rest quantize the output afterwards. The bits are the same either way.

    `causal`: query i sits at position i below kv_len, or is padding (a teacher-forcing forward, Tq = S); the
    Triton path's backward then runs a fused causal backward over the triangle (`triton_attention._Attention`).
    The output is the same.
    """
    if q.is_cuda:
        triton = _triton()
        if triton is not None and (quantize is None or triton.attention_quantize_fits(q.shape[-1], quantize)):
            return triton.attention(q, k, v, q_pos, kv_len, scale=scale, k_scale=k_scale, v_scale=v_scale,
                                    quantize=quantize, causal=causal)
    if quantize is not None:
        return _with_quantized(attention(q, k, v, q_pos, kv_len, scale=scale, k_scale=k_scale, v_scale=v_scale,
                                         causal=causal), quantize)
    b, hq, tq, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    group = hq // hkv
    rows = group * tq  # the queries that share one KV head: [g0 t0, g0 t1, ..., g1 t0, ...]
    qf = q.float().reshape(b * hkv, rows, d)
    pos = q_pos.to(q.device)[:, None, None, :].expand(b, hkv, group, tq).reshape(b * hkv, rows, 1)
    length = kv_len.to(q.device)[:, None].expand(b, hkv).reshape(b * hkv, 1, 1)

    m = qf.new_full((b * hkv, rows), -math.inf)  # running max (a stabiliser only: detached)
    l = qf.new_zeros((b * hkv, rows))  # running sum of exp
    acc = qf.new_zeros((b * hkv, rows, d))
    for start in range(0, s, KV_BLOCK):
        kb = _block(k, k_scale, start, q.dtype).reshape(b * hkv, KV_BLOCK, d)
        vb = _block(v, v_scale, start, q.dtype).reshape(b * hkv, KV_BLOCK, d)
        slot = torch.arange(start, start + KV_BLOCK, device=q.device)
        visible = (slot <= pos) & (slot < length)  # [b*hkv, rows, KV_BLOCK]
        scores = torch.where(visible, _tiled_matmul(qf, kb.transpose(1, 2)) * scale, -math.inf)
        m_new = torch.maximum(m, scores.detach().amax(-1))
        m_use = torch.where(m_new == -math.inf, 0.0, m_new)  # rows that saw nothing yet: exp(-inf) = 0, no NaN
        p = torch.exp(scores - m_use[..., None])
        alpha = torch.exp(m - m_use)
        l = l * alpha + p.sum(-1)
        acc = acc * alpha[..., None] + _tiled_matmul(p, vb)
        m = m_new
    out = acc / torch.where(l == 0, 1.0, l)[..., None]
    return out.reshape(b, hkv, group, tq, d).reshape(b, hq, tq, d).to(q.dtype)


def _with_quantized(out: torch.Tensor, fmt: QuantFormat) -> tuple[torch.Tensor, Quantized]:
    """(out [B, Hq, T, D], out as o_proj reads it, [B * T, Hq * D], quantized to fmt)."""
    from precision_engine.numerics.quantize import quantize_rows_1xG

    b, hq, t, d = out.shape
    return out, quantize_rows_1xG(out.detach().transpose(1, 2).reshape(b * t, hq * d), fmt)


def log_softmax(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """fp32 log-softmax of logits.float() / temperature over the last dim: the sampler's and the trainer's."""
    if logits.is_cuda:
        triton = _triton()
        if triton is not None:
            return triton.log_softmax(logits, temperature)
    lead, vocab = logits.shape[:-1], logits.shape[-1]
    x = logits.float().reshape(-1, vocab).contiguous() / temperature
    chunk = min(vocab, VOCAB_CHUNK)  # a function of the vocabulary only, as the padding is
    rows, chunks = x.shape[0], -(-vocab // chunk)
    padded = F.pad(x, (0, chunks * chunk - vocab), value=-math.inf).view(rows, chunks, chunk)
    shifted = padded - padded.amax(dim=(1, 2), keepdim=True)
    lse = torch.log(torch.exp(shifted).sum(-1).sum(-1))  # within chunks, then across: fixed lengths both
    return (shifted.view(rows, chunks * chunk)[:, :vocab] - lse[:, None]).reshape(*lead, vocab)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's apply_rotary_pos_emb for one tensor: x [B, T, H, D], cos, sin [B, T, D] in x.dtype -> [B, H, T, D],
    x * cos + rotate_half(x) * sin, each op rounded to x.dtype. CUDA tensors (bf16/fp16, power-of-two D) take
    one Triton launch (`triton_invariant.rope`, the same three rounded ops, differentiable) with or without
    autograd, so the engine's decode and the trainer's forward run one kernel; the rest these torch ops."""
    if x.is_cuda and _rope_kernel_fits(x):
        triton = _triton()
        if triton is not None:
            return triton.rope(x, cos, sin)
    x = x.transpose(1, 2)
    half = x.shape[-1] // 2
    return x * cos[:, None] + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin[:, None]


def rope_qk(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rope(q, cos, sin), rope(k, cos, sin)), their bits. CUDA tensors the kernel takes rotate in ONE launch
    (`triton_invariant.rope_qk`; a CUDA-graph decode step pays per launch), the rest as the two calls."""
    if q.is_cuda and _rope_kernel_fits(q) and k.dtype == q.dtype:
        triton = _triton()
        if triton is not None:
            return triton.rope_qk(q, k, cos, sin)
    return rope(q, cos, sin), rope(k, cos, sin)


def _rope_kernel_fits(x: torch.Tensor) -> bool:
    d = x.shape[-1]
    return x.dtype in (torch.bfloat16, torch.float16) and d >= 2 and not d & (d - 1)


def silu(x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x) in fp32 as x / (1 + exp(-x)), rounded to x.dtype (`F.silu`'s CPU tail rounds differently).
    Differentiable (`_Silu`)."""
    return _Silu.apply(x) if torch.is_grad_enabled() and x.requires_grad else _silu(x)


def _silu(x: torch.Tensor) -> torch.Tensor:
    x32 = x.float()
    return as_dtype(x32 / (1.0 + torch.exp(-x32)), x.dtype)


class _Silu(torch.autograd.Function):
    """`silu` with autograd's own arithmetic through its ops, op by op in fp32: dy / den for the numerator and
    (dy * ((x / den) / den)) * e through den = e + 1, e = exp(-x), summed, rounded once to x.dtype. Except where
    e is inf (x < -88.7) or 0 (x > 103.9): there the chain can multiply 0 by inf, a NaN that would poison the
    whole weight gradient, and the second term is its limit, 0."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _silu(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return silu_backward(x, grad)


def silu_backward(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """d silu(x) for dy = `grad`, in `_Silu`'s arithmetic (the CPU twin of the GPU's SiLU backward kernel)."""
    x32, t = x.float(), grad.float()
    e = torch.exp(-x32)
    den = e + 1.0
    via_den = torch.where((e == 0) | torch.isinf(e), 0.0, (t * ((x32 / den) / den)) * e)
    return (t / den + via_den).to(x.dtype)


def _tiled_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32 [G, M, K] @ [G or 1, K, N] -> [G, M, N], M cut into TILE_M-row tiles of one bmm (see module doc)."""
    g, m, k = a.shape
    n = b.shape[-1]
    tiles = -(-m // TILE_M)
    if tiles * TILE_M != m:
        a = F.pad(a, (0, 0, 0, tiles * TILE_M - m))
    b_tiles = b[:, None].expand(g, tiles, k, n).reshape(g * tiles, k, n)
    out = torch.bmm(a.reshape(g * tiles, TILE_M, k), b_tiles)
    return out.reshape(g, tiles * TILE_M, n)[:, :m]


def _block(states: torch.Tensor, scale: torch.Tensor | None, start: int, dtype: torch.dtype) -> torch.Tensor:
    """Slots [start, start + KV_BLOCK) as fp32, zero-padded past the end, dequantized from FP8 when scaled."""
    block = states[:, :, start : start + KV_BLOCK]
    if block.shape[2] < KV_BLOCK:
        block = F.pad(block.float(), (0, 0, 0, KV_BLOCK - block.shape[2])).to(block.dtype)
    return _dequantize(block, scale, dtype).float()


def _dequantize(states: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    if scale is None:
        return states
    scale = scale.to(device=states.device, dtype=torch.float32)
    scale = scale.view(1, -1, 1, 1) if scale.dim() == 1 else scale
    return (states.float() * scale).to(dtype)


def _triton():
    """The Triton kernels module, or None while it does not exist yet (then CUDA runs the torch versions)."""
    try:
        from precision_engine.numerics import triton_invariant
    except ImportError:
        return None
    return triton_invariant


__all__ = ["KV_BLOCK", "TILE_M", "VOCAB_CHUNK", "attention", "linear", "log_softmax", "rms_norm", "rope", "rope_qk",
           "silu"]
