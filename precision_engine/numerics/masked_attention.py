"""PyTorch's fused SDPA over position-indexed keys, with `invariant.attention`'s visibility.

Two places want attention without batch invariance: the decoder's fast mode and the batch-invariant attention's
backward (which need not be bitwise). Both take keys by position (slot j holds position j) and a mask, not
`is_causal`, because ragged rows end at different kv_len; a teacher-forcing forward, whose query i sits at position
i (or is padding), takes `causal_sdpa` instead; `causal_backward_from_lse` differentiates it from a forward's own
output and logsumexp, without recomputing the forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend


def visible_slots(q_pos: torch.Tensor, kv_len: torch.Tensor, slots: int) -> torch.Tensor:
    """[B, Tq, S] bool: query i of sequence b sees slot j iff j <= q_pos[b, i] and j < kv_len[b]."""
    slot = torch.arange(slots, device=q_pos.device)
    return (slot <= q_pos[:, :, None]) & (slot < kv_len[:, None, None])


def masked_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, *,
                scale: float) -> torch.Tensor:
    """q [B, Hq, T, D], k/v [B, Hkv, S, D], visible [B, T, S] -> [B, Hq, T, D] in q.dtype, differentiable.

    GQA as G * T queries per kv head (rows g * T + t), k and v read once: SDPA's enable_gqa with a mask falls back
    to the math kernel on CUDA, which repeats the cache G times. A query that sees no slot reads slot 0 instead
    (any finite output; a fully masked row would be NaN)."""
    b, hq, t, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    group = hq // hkv
    blind = ~visible.any(-1)
    visible = visible | (blind[:, :, None] & (torch.arange(s, device=q.device) == 0))
    mask = visible[:, None, None].expand(b, 1, group, t, s).reshape(b, 1, group * t, s)
    out = F.scaled_dot_product_attention(q.reshape(b, hkv, group * t, d), k, v, attn_mask=mask, scale=scale)
    return out.reshape(b, hq, t, d)


def causal_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float) -> torch.Tensor:
    """q [B, Hq, T, D], k/v [B, Hkv, T, D] -> [B, Hq, T, D], query i seeing slots j <= i: `masked_sdpa`'s output for
    every query that sits at position i below kv_len (a teacher-forcing forward, rows right-padded); a padding
    query's output is finite and meaningless, as there. No mask: PyTorch's flash kernel skips the triangle's upper
    half, which `masked_sdpa`'s masked kernel computes and discards, and reads each kv head once (enable_gqa).
    Flash takes 16-bit inputs only; others go to the memory-efficient kernel, which takes no enable_gqa (the math
    kernel would materialise every T x T score matrix), so their kv heads are repeated first."""
    if q.dtype in (torch.float16, torch.bfloat16):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def lse_backward_fits(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether `causal_backward_from_lse` runs for these inputs: 16-bit ones on the CPU (its flash kernel takes a
    logsumexp), or on a GPU where SDPA itself would run them on cuDNN. Its backward from a given logsumexp took
    2.8 ms at the 8B layer's 8192 tokens on an H100 against 3.8 for SDPA's fwd+bwd; flash's about 5.1 (BENCHMARKS,
    thirty-sixth session), so elsewhere the forward is recomputed instead."""
    if q.dtype not in (torch.float16, torch.bfloat16):
        return False
    if q.device.type == "cpu":
        return True
    return q.is_cuda and (torch.ops.aten._fused_sdp_choice(q, k, v, None, 0.0, True, enable_gqa=True)
                          == SDPBackend.CUDNN_ATTENTION.value)


def causal_backward_from_lse(grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             out: torch.Tensor, logsumexp: torch.Tensor, *, scale: float) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv) of `causal_sdpa(q, k, v)` at a forward that gave `out` with `logsumexp` ([B, Hq, T] fp32,
    natural log of each query's sum of exp(scale * scores), +inf for a query that saw nothing): a fused backward
    that rebuilds the probabilities from logsumexp, so the forward is not run again (`causal_sdpa` under autograd
    runs it once more inside the backward). GQA as in `causal_sdpa`: dk, dv per kv head. Only where
    `lse_backward_fits`; k and v must be finite in every slot a query's triangle covers."""
    t = q.shape[2]
    if q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad, q, k, v, out, logsumexp, 0.0, True, scale=scale)
    if grad.stride() != out.stride():  # cuDNN would copy it into out's layout, with a warning
        grad = torch.empty_like(out).copy_(grad)
    no_dropout = torch.zeros((), dtype=torch.int64, device=q.device)  # the philox state, read only with dropout
    return torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
        grad, q, k, v, out, logsumexp[..., None], no_dropout, no_dropout, None, None, None, t, t, 0.0, True,
        scale=scale)[:3]
