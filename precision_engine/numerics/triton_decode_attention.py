"""Split-KV decode attention for fast mode: one query per sequence against the KV cache, in many short programs.

Why a second attention kernel: the batch-invariant one (`triton_invariant.attention`) gives a decode query the
bits of its row in the full causal forward, so at decode it keeps that forward's 64-row tiles (4 live rows of a
GQA group, the rest padding) and walks the whole context in one program per (sequence, kv head). On the H200
that is latency-bound: 30-32 us a layer at batch 64 and 256 cached tokens, for 16-33 MB of keys and values.
Fast mode owes nobody those bits, so here a program takes 16 rows (the GQA group, padded to the smallest
tensor-core tile) and one chunk of CHUNK slots; the chunks' partial softmax states (max, sum, accumulator,
fp32) are merged by the (sequence, kv head)'s last program to arrive, in increasing chunk order, so the
result does not depend on which program finishes first (no second launch, no atomics in the arithmetic).

An FP8 cache is read in place and dequantized per block as `numerics.kv_cache.dequantize_kv` does. The
twin spells out the same chunked arithmetic in torch; the tests hold the kernel to it and to float64.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from precision_engine.numerics.masked_attention import visible_slots
from precision_engine.numerics.triton_gemm import _tile_counters
from precision_engine.numerics.triton_invariant import (
    FP8_KV_DTYPE, LOG2E, _check_attention, _dequantized, _interpreting, _mma_operand, _round,
)

ROWS = 16  # query heads of one GQA group per program, padded to (at least) the smallest tensor-core tile
BLOCK_N = 64  # slots per online-softmax step inside a chunk
CHUNK = 128  # slots per program: a decode step's programs each walk at most CHUNK / BLOCK_N blocks
WARPS = 4
STAGES = 2


@triton.jit(do_not_specialize=["pos_ptr", "len_ptr", "S"])
def _decode_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, pos_ptr, len_ptr, ks_ptr, vs_ptr, ws_ptr, ml_ptr,
                             count_ptr, qk_scale, S, Hq, Hkv,
                             stride_qb, stride_qh, stride_kb, stride_kh, stride_ks,
                             stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_pb,
                             G: tl.constexpr, D: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
                             CHUNK: tl.constexpr, FP8_KV: tl.constexpr, SCALE_PER_HEAD: tl.constexpr,
                             INTERPRET: tl.constexpr):
    """Program (chunk c, sequence b * Hkv + kv head): rows r < G are query heads hk * G + r of b's one query.
    Partials: ws[c, b, hq, :] (unnormalised accumulator) and ml[c, b, hq, 0:2] = (max in log2 units, sum)."""
    chunk = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // Hkv
    hk = bh % Hkv
    rows = tl.arange(0, ROWS)
    row_ok = rows < G
    hq = hk * G + rows
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + b.to(tl.int64) * stride_qb + hq[:, None].to(tl.int64) * stride_qh + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    pos = tl.load(pos_ptr + b * stride_pb)
    kv_len = tl.minimum(tl.load(len_ptr + b), S)
    hi = tl.minimum(tl.minimum(pos + 1, kv_len), chunk * CHUNK + CHUNK).to(tl.int32)  # slots this chunk sees
    k_base = k_ptr + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    if FP8_KV:
        if SCALE_PER_HEAD:
            k_scale = tl.load(ks_ptr + hk)
            v_scale = tl.load(vs_ptr + hk)
        else:
            k_scale = tl.load(ks_ptr)
            v_scale = tl.load(vs_ptr)

    m_i = tl.full((ROWS,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((ROWS,), dtype=tl.float32)
    acc = tl.zeros((ROWS, D), dtype=tl.float32)
    for start in range(chunk * CHUNK, hi, BLOCK_N):
        slots = start + tl.arange(0, BLOCK_N)
        slot_ok = slots < hi  # slots past kv_len may hold anything (NaN): never loaded
        k = tl.load(k_base + slots[:, None] * stride_ks + offs_d[None, :], mask=slot_ok[:, None], other=0.0)
        if FP8_KV:
            k = _round(k.to(tl.float32) * k_scale, q_ptr.dtype.element_ty, INTERPRET)
        s = tl.dot(_mma_operand(q, INTERPRET), _mma_operand(k, INTERPRET).T) * qk_scale  # log2 units
        s = tl.where(slot_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + slots[:, None] * stride_vs + offs_d[None, :], mask=slot_ok[:, None], other=0.0)
        if FP8_KV:
            v = _round(v.to(tl.float32) * v_scale, q_ptr.dtype.element_ty, INTERPRET)
        acc = acc * alpha[:, None]
        acc = tl.dot(_mma_operand(_round(p, v.dtype, INTERPRET), INTERPRET), _mma_operand(v, INTERPRET), acc)
        m_i = m_new

    # This chunk's partial state, then the in-order merge by the last of the sequence's programs to arrive.
    chunks = tl.num_programs(0)
    batch = tl.num_programs(1) // Hkv
    part = (chunk * batch + b).to(tl.int64) * Hq + hq  # the (chunk, b, hq) entry of the partials
    tl.store(ws_ptr + part[:, None] * D + offs_d[None, :], acc, mask=row_ok[:, None])
    tl.store(ml_ptr + part * 2, m_i, mask=row_ok)
    tl.store(ml_ptr + part * 2 + 1, l_i, mask=row_ok)
    tl.debug_barrier()  # every thread's partial is written before the release below
    arrived = tl.atomic_add(count_ptr + bh, 1, sem="acq_rel", scope="gpu")
    if arrived == chunks - 1:
        m_all = tl.full((ROWS,), float("-inf"), dtype=tl.float32)
        l_all = tl.zeros((ROWS,), dtype=tl.float32)
        out = tl.zeros((ROWS, D), dtype=tl.float32)
        for c in range(0, chunks):
            other = (c * batch + b).to(tl.int64) * Hq + hq
            m_c = tl.load(ml_ptr + other * 2, mask=row_ok, other=float("-inf"), cache_modifier=".cg")
            l_c = tl.load(ml_ptr + other * 2 + 1, mask=row_ok, other=0.0, cache_modifier=".cg")
            a_c = tl.load(ws_ptr + other[:, None] * D + offs_d[None, :], mask=row_ok[:, None], other=0.0,
                          cache_modifier=".cg")
            m_new = tl.maximum(m_all, m_c)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            old = tl.exp2(m_all - m_use)
            new = tl.exp2(m_c - m_use)
            l_all = l_all * old + l_c * new
            out = out * old[:, None] + a_c * new[:, None]
            m_all = m_new
        out = out / tl.where(l_all == 0.0, 1.0, l_all)[:, None]  # a query that sees nothing gives zeros
        o_offs = b.to(tl.int64) * stride_ob + hq.to(tl.int64) * stride_oh
        tl.store(o_ptr + o_offs[:, None] + offs_d[None, :], _round(out, o_ptr.dtype.element_ty, INTERPRET),
                 mask=row_ok[:, None])
        tl.atomic_xchg(count_ptr + bh, 0, sem="relaxed", scope="gpu")  # ready for the next launch


def decode_attention(q, k, v, q_pos, kv_len, *, scale: float, k_scale=None, v_scale=None) -> torch.Tensor:
    """Attention of ONE query per sequence, q [B, Hq, 1, D], over a position-indexed cache k, v [B, Hkv, S, D]
    (BF16, or FP8 with dequant multipliers of shape [] or [Hkv]); the query of row b sees slots
    j <= q_pos[b, 0], j < kv_len[b]. Not batch-invariant (fast mode); no autograd (a cache)."""
    _check_attention(q, k, v, q_pos, kv_len, k_scale, v_scale)
    b, hq, tq, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    if tq != 1:
        raise ValueError(f"decode_attention takes one query per row, got Tq={tq}")
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    q_pos = q_pos.to(device=q.device, dtype=torch.int64)
    kv_len = kv_len.to(device=q.device, dtype=torch.int64).contiguous()
    out = torch.empty((b, hq, 1, d), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    fp8 = k.dtype == FP8_KV_DTYPE
    if fp8:
        k_scale, v_scale = (t.to(device=q.device, dtype=torch.float32).reshape(-1).contiguous()
                            for t in (k_scale, v_scale))
    else:
        k_scale = v_scale = kv_len  # never read
    chunks = triton.cdiv(s, CHUNK)
    ws = torch.empty((chunks, b, hq, d), dtype=torch.float32, device=q.device)
    ml = torch.empty((chunks, b, hq, 2), dtype=torch.float32, device=q.device)
    _decode_attention_kernel[(chunks, b * hkv)](
        q, k, v, out, q_pos, kv_len, k_scale, v_scale, ws, ml, _tile_counters(q.device, b * hkv),
        scale * LOG2E, s, hq, hkv,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), q_pos.stride(0),
        G=hq // hkv, D=d, ROWS=max(ROWS, triton.next_power_of_2(hq // hkv)), BLOCK_N=BLOCK_N, CHUNK=CHUNK, FP8_KV=fp8,
        SCALE_PER_HEAD=fp8 and k_scale.numel() > 1, INTERPRET=_interpreting(),
        num_warps=WARPS, num_stages=STAGES,
    )
    return out


def decode_attention_twin(q, k, v, q_pos, kv_len, *, scale: float, k_scale=None, v_scale=None) -> torch.Tensor:
    """The kernel's arithmetic in torch: per CHUNK of slots an fp32 online softmax over BLOCK_N-wide blocks in
    log2 units (p rounded to v's dtype before P @ V), then the chunks merged in increasing order."""
    if k.dtype == FP8_KV_DTYPE:
        k, v = _dequantized(k, k_scale, q.dtype), _dequantized(v, v_scale, q.dtype)
    b, hq, _, d = q.shape
    g, s = hq // k.shape[1], k.shape[2]
    seen = visible_slots(q_pos, kv_len, s)[:, None]  # [B, 1, 1, S]
    kf, vf = (torch.where(seen[:, :, 0, :, None], t, 0).repeat_interleave(g, 1).float() for t in (k, v))
    qf = q.float()
    m_all = torch.full((b, hq, 1, 1), float("-inf"), device=q.device)
    l_all = torch.zeros(b, hq, 1, 1, device=q.device)
    out = torch.zeros(b, hq, 1, d, device=q.device)
    for lo in range(0, s, CHUNK):
        m_i = torch.full((b, hq, 1, 1), float("-inf"), device=q.device)
        l_i = torch.zeros(b, hq, 1, 1, device=q.device)
        acc = torch.zeros(b, hq, 1, d, device=q.device)
        for start in range(lo, min(lo + CHUNK, s), BLOCK_N):
            blk = slice(start, start + BLOCK_N)
            sc = torch.where(seen[..., blk], (qf @ kf[:, :, blk].transpose(-1, -2)) * (scale * LOG2E), float("-inf"))
            m_new = torch.maximum(m_i, sc.amax(-1, keepdim=True))
            m_use = torch.where(m_new == float("-inf"), 0.0, m_new)
            alpha = torch.exp2(m_i - m_use)
            p = torch.exp2(sc - m_use)
            l_i = l_i * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + p.to(v.dtype).float() @ vf[:, :, blk]
            m_i = m_new
        m_new = torch.maximum(m_all, m_i)
        m_use = torch.where(m_new == float("-inf"), 0.0, m_new)
        old, new = torch.exp2(m_all - m_use), torch.exp2(m_i - m_use)
        l_all = l_all * old + l_i * new
        out = out * old + acc * new
        m_all = m_new
    return (out / torch.where(l_all == 0, 1.0, l_all)).to(q.dtype)


__all__ = ["CHUNK", "decode_attention", "decode_attention_twin"]
