"""The batch-invariant causal attention in Triton, and the KV-cache write it reads from.

`attention`: ONE kernel for decode (a few queries against the position-indexed cache) and the full causal forward.
A program owns BLOCK_M rows of (query, head of a GQA group) of one (sequence, kv head) and walks KV blocks of
KV_BLOCK slots from slot 0 upwards with an fp32 online softmax. A row's state only changes through its own scores;
a block that is fully masked for a row (the tile's other rows needed it) leaves m, l and the accumulator exactly
as they were (alpha = 1, p = 0), so a query gets the same bits in both modes. The kernel also reads an FP8 KV
cache in place, dequantizing each block as it loads it (decode reads one byte per cached element instead of a
BF16 copy made per step), and may quantize its output for o_proj in its epilogue. `attention(..., fast=True)` is
fast mode's launch of the same kernel and NOT batch-invariant: 16-row decode tiles, an FP8 cache widened exactly
with its scales on the scores and the output. `attention_twin` spells out the kernel's arithmetic in torch. The
backward (not batch-invariant, need not be) differentiates PyTorch's fused SDPA under the same mask.

`kv_write`: a step's keys and values into the cache at their positions, FP8 with the cache's scales or as they
are, in one launch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from precision_engine.errors import UnsupportedError
from precision_engine.numerics.contract import TRITON_INTERPRET, Quantized, fp8_dtype
from precision_engine.numerics.formats import Axis, Granularity, QuantFormat
from precision_engine.numerics.masked_attention import (
    causal_backward_from_lse,
    causal_sdpa,
    lse_backward_fits,
    masked_sdpa,
    visible_slots,
)
from precision_engine.numerics.triton_exact import _mma_operand, _round
from precision_engine.numerics.triton_quant import (
    _amax,
    _fmt_args,
    _quotient,
    _reciprocal,
    _round_to_fp8_grid,
    _scale_from_amax,
    _to_fp8,
)

LOG2E = 1.4426950408889634
FP8_KV_DTYPE = torch.float8_e4m3fn  # numerics.kv_cache.KV_FP8_DTYPE, the cache attention reads in place


@triton.jit
def _kv_write_kernel(k_ptr, v_ptr, pos_ptr, ko_ptr, vo_ptr, ks_ptr, vs_ptr, T, H, stride_kb, stride_kh, stride_kt,
                     stride_vb, stride_vh, stride_vt, stride_pb, stride_pt, stride_ob, stride_oh, stride_os,
                     D: tl.constexpr, HB: tl.constexpr, BLOCK_H: tl.constexpr, FP8_KV: tl.constexpr,
                     SCALE_PER_HEAD: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Token (b, t) of k and v, heads j * HB .. j * HB + HB - 1 for program (b * T + t, j), into slot pos[b, t]
    of the cache (ko/vo share their strides). FP8_KV: `quantize_kv`'s bits, fp8_rne(clamp(x32 / scale, +-448))
    with +-Inf stored as NaN."""
    bt = tl.program_id(0)
    b = (bt // T).to(tl.int64)
    t = (bt % T).to(tl.int64)
    offs_h = tl.program_id(1) * HB + tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, D)
    mask = (offs_h[:, None] < H) & (tl.arange(0, BLOCK_H)[:, None] < HB)
    h64 = offs_h[:, None].to(tl.int64)
    slot = tl.load(pos_ptr + b * stride_pb + t * stride_pt).to(tl.int64)
    o_offs = b * stride_ob + h64 * stride_oh + slot * stride_os + offs_d[None, :]
    k = tl.load(k_ptr + b * stride_kb + h64 * stride_kh + t * stride_kt + offs_d[None, :], mask=mask, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + h64 * stride_vh + t * stride_vt + offs_d[None, :], mask=mask, other=0.0)
    if FP8_KV:
        if SCALE_PER_HEAD:
            k_scale = tl.load(ks_ptr + offs_h, mask=offs_h < H, other=1.0)[:, None]
            v_scale = tl.load(vs_ptr + offs_h, mask=offs_h < H, other=1.0)[:, None]
        else:
            k_scale = tl.load(ks_ptr)
            v_scale = tl.load(vs_ptr)
        k = _kv_fp8(k.to(tl.float32), k_scale, ko_ptr.dtype.element_ty, EXACT_ROUND)
        v = _kv_fp8(v.to(tl.float32), v_scale, vo_ptr.dtype.element_ty, EXACT_ROUND)
    tl.store(ko_ptr + o_offs, k, mask=mask)
    tl.store(vo_ptr + o_offs, v, mask=mask)


@triton.jit
def _kv_fp8(x, scale, out_ty: tl.constexpr, EXACT_ROUND: tl.constexpr):
    x = tl.where(tl.abs(x) == float("inf"), float("nan"), x)
    y = tl.math.div_rn(x, scale + tl.zeros_like(x))
    y = tl.where(y != y, y, tl.minimum(tl.maximum(y, -448.0), 448.0))
    if EXACT_ROUND:  # the interpreter's fp8 cast misrounds: round onto the E4M3 grid first (exact)
        y = _round_to_fp8_grid(y, 3, -6)
    return y.to(out_ty, fp_downcast_rounding="rtne")


# kv heads per program, by FP8 store or not; elementwise, so it changes no bit. One decode token of 64 sequences,
# 8 kv heads (same sweep): an FP8 store 1.7 us at 2 heads where all 8 in one program took 2.0; a BF16 store is
# fastest at 8 (1.4 us; 1.5-1.6 at fewer).
KV_WRITE_HEADS = {True: 2, False: 8}
KV_WRITE_WARPS = 4


def kv_write(k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, k_store: torch.Tensor,
             v_store: torch.Tensor, k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None) -> None:
    """k, v [B, H, T, D] (any strides with a contiguous last dim) into slots positions [B, T] of rows 0..B-1 of
    k_store, v_store [B', H, S, D] (one layout, last dim contiguous), one launch. FP8 stores (float8_e4m3fn)
    take dequant multipliers k_scale / v_scale ([] or [H], fp32 on the device) and get `quantize_kv`'s bytes;
    other stores get k and v as they are."""
    b, h, t, d = k.shape
    fp8 = k_store.dtype == FP8_KV_DTYPE
    if v.shape != k.shape or positions.shape != (b, t) or k_store.stride() != v_store.stride() \
            or k_store.shape[1:2] + k_store.shape[3:] != (h, d) or k_store.stride(-1) != 1 or d & (d - 1) \
            or (fp8 and (k_scale is None or v_scale is None)) or (not fp8 and k_store.dtype != k.dtype):
        raise ValueError(f"kv_write: k {tuple(k.shape)}, v {tuple(v.shape)}, positions {tuple(positions.shape)} "
                         f"do not fit the store {tuple(k_store.shape)} {k_store.dtype}")
    k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (k, v))
    if fp8:
        k_scale, v_scale = (s.to(torch.float32).reshape(-1).contiguous() for s in (k_scale, v_scale))
    else:
        k_scale = v_scale = positions  # never read
    if b * t:
        heads = min(h, KV_WRITE_HEADS[fp8])
        _kv_write_kernel[(b * t, triton.cdiv(h, heads))](
            k, v, positions, k_store, v_store, k_scale, v_scale, t, h, k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), positions.stride(0), positions.stride(1), k_store.stride(0),
            k_store.stride(1), k_store.stride(2), D=d, HB=heads, BLOCK_H=triton.next_power_of_2(heads), FP8_KV=fp8,
            SCALE_PER_HEAD=fp8 and k_scale.numel() > 1, EXACT_ROUND=TRITON_INTERPRET, num_warps=KV_WRITE_WARPS)


ATTN_BLOCK_M = 64  # rows (query, head of the GQA group) per program, in decode and in the full forward alike
KV_BLOCK = 64  # KV slots per online-softmax step, walked from slot 0 upwards
ATTN_WARPS = 4
# KV blocks in flight in the full forward and in a decode step, bitwise the same at any depth: 3 makes the forward
# 1.14-1.20x faster than 2 on the H200 and the H100 (8192 tokens, 8B heads: benchmarks/2026-12-06/s37_calls) and
# a decode step 2-4 us a layer faster at 256-384 cached tokens (scripts/decode_sweep.py --attention).
ATTN_STAGES = 3
ATTN_DECODE_STAGES = 3
# Fast mode (not batch-invariant) decodes with 16-row tiles, the GQA group padded to the smallest tensor-core
# tile instead of 64 rows, and an FP8 cache widened exactly to BF16 with its scales applied to the scores and
# the output. Same sweep, batch 64, 8B heads, 128 / 256 / 384 cached tokens (2026-12-01, fifth session): FP8
# 10.9 / 16.9 / 22.7 us with 64 slots a step, where the invariant launch takes 15.9 / 24.4 / 32.6; BF16
# 12.4 / 20.8 / 29.0 with 32 slots (64: 12.9 / 22.9 / 32.0). Every slots x warps x stages variant: benchmarks/.
FAST_BLOCK_M = 16
FAST_KV_BLOCK = {True: 64, False: 32}  # fast decode's KV slots per online-softmax step, by FP8 cache or not
FAST_ATTN_WARPS = 4
# Register cap of fast mode's FP8-cache decode launch: its 512 programs (64 sequences x 8 kv heads) fill the
# H200's 132 SMs in one wave only at 4 per SM, <= 128 registers a thread. With o_proj's quantization epilogue
# ptxas took 168 (3 per SM, ncu), which cost 13.7 / 20.5 / 26.9 us at 128 / 256 / 384 cached tokens; capped at
# 120 it takes 12.0 / 18.0 / 23.9, same bytes (128: within 1%; 96: slower). The BF16 cache fits uncapped.
FAST_ATTN_MAX_REGS = {True: 120, False: None}  # by FP8 cache or not
# `_attention_kernel`'s quantization parameters when it quantizes nothing (QUANT=False never reads them).
_NO_QUANT = {"FMAX": 1.0, "RFMAX": 1.0, "MBITS": 3, "EMIN": -6, "POW2": False, "EXACT_ROUND": False}


@triton.jit
def _masked_rows_kernel(src_ptr, dst_ptr, pos_ptr, len_ptr, rows, H, T, stride_sb, stride_sh, stride_st,
                        stride_db, stride_dh, stride_dt, stride_pb, BY_SLOT: tl.constexpr, D: tl.constexpr,
                        ROWS: tl.constexpr):
    """dst[b, h, t] = src[b, h, t] where row t is kept, else zeros (one dtype): with BY_SLOT, slots t < kv_len[b]
    (k and v); otherwise queries that see a slot, q_pos[b, t] >= 0 and kv_len[b] >= 1 (the output's grad). A
    dropped row is not read, so whatever it holds (NaN included) leaves as +0, as torch.where and masked_fill give."""
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = row < rows
    t = row % T
    b = row // (T * H)
    h = (row // T) % H
    length = tl.load(len_ptr + b, mask=row_ok, other=0)
    if BY_SLOT:
        keep = t < length
    else:
        keep = (tl.load(pos_ptr + b * stride_pb + t, mask=row_ok, other=-1) >= 0) & (length >= 1)
    d = tl.arange(0, D)
    src = src_ptr + (b.to(tl.int64) * stride_sb + h * stride_sh + t * stride_st)[:, None] + d[None, :]
    dst = dst_ptr + (b.to(tl.int64) * stride_db + h * stride_dh + t * stride_dt)[:, None] + d[None, :]
    tl.store(dst, tl.load(src, mask=(row_ok & keep)[:, None], other=0.0), mask=row_ok[:, None])


BACKWARD_INPUT_ROWS = 16


def backward_inputs_fit(grad: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor,
                        kv_len: torch.Tensor) -> bool:
    """Whether `backward_inputs` takes these: rows contiguous (an expanded grad, as `out.sum()` gives, is not), a
    power-of-2 head dim, and unit last strides of q_pos and kv_len (its kernel's addressing). The backward masks
    the others with the torch ops."""
    d = k.shape[-1]
    return (all(t.stride(-1) == 1 for t in (grad, k, v, q_pos, kv_len)) and d & (d - 1) == 0)


def backward_inputs(grad: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor, kv_len: torch.Tensor,
                    out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the batch-invariant attention's backward feeds cuDNN's (`causal_backward_from_lse`), in three launches
    that each read and write their rows once: the output's grad with blind queries' rows zeroed, in q's dtype and
    `out`'s layout (cuDNN's), and k, v with the slots past kv_len zeroed. grad comes in out's dtype (the caller
    casts one that does not), and every input as `backward_inputs_fit` says. The torch ops they replace (a
    broadcast masked_fill, two where, the grad's copy into out's layout) ran as seven non-vectorised kernels:
    0.415 against 0.186 ms at the 8B layer's shape on an H100 (BENCHMARKS, thirty-ninth session)."""
    if not backward_inputs_fit(grad, k, v, q_pos, kv_len) or out.stride(-1) != 1 or grad.dtype != out.dtype:
        raise ValueError(f"backward_inputs: rows of grad {tuple(grad.shape)} {grad.dtype}, k, v and out must be "
                         f"contiguous, a power of 2 long and in {out.dtype}, q_pos and kv_len of unit last stride")
    grad_in = torch.empty_like(out)
    kz = torch.empty_like(k, memory_format=torch.contiguous_format)
    vz = torch.empty_like(v, memory_format=torch.contiguous_format)
    for src, dst, by_slot in ((grad, grad_in, False), (k, kz, True), (v, vz, True)):
        b, h, t, d = src.shape
        rows = b * h * t
        _masked_rows_kernel[(triton.cdiv(rows, BACKWARD_INPUT_ROWS),)](
            src, dst, q_pos, kv_len, rows, h, t, *src.stride()[:3], *dst.stride()[:3], q_pos.stride(0),
            BY_SLOT=by_slot, D=d, ROWS=BACKWARD_INPUT_ROWS, num_warps=4)
    return grad_in, kz, vz


@triton.jit
def _kv_block(base, slots, stride, offs_d, slot_ok, MASKED: tl.constexpr):
    """A KV block's rows [BLOCK_N, D]; MASKED where it may reach past kv_len, whose slots may hold anything (NaN)
    and are never loaded."""
    at = base + slots[:, None] * stride + offs_d[None, :]
    if MASKED:
        return tl.load(at, mask=slot_ok[:, None], other=0.0)
    return tl.load(at)


@triton.jit(do_not_specialize=["pos_ptr", "len_ptr", "Tq", "S", "stride_pb", "stride_pt"])
def _attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, xq_ptr, xs_ptr, lse_ptr, pos_ptr, len_ptr, ks_ptr, vs_ptr,
                      qk_scale, Tq, S, Hkv, stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_ks,
                      stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_ot, stride_pb, stride_pt,
                      G: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      FP8_KV: tl.constexpr, SCALE_PER_HEAD: tl.constexpr, FOLD_SCALES: tl.constexpr,
                      INTERPRET: tl.constexpr, LSE: tl.constexpr, QUANT: tl.constexpr, FMAX: tl.constexpr,
                      RFMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr, POW2: tl.constexpr,
                      EXACT_ROUND: tl.constexpr):
    """Rows r of one (sequence, kv head): query r // G, query head r % G. Arguments that differ between a decode
    step and the full forward (Tq, S, the positions' layout) are not specialized on: one binary for both.

    FP8_KV: k, v are float8_e4m3fn with fp32 dequant multipliers (one, or one per kv head with SCALE_PER_HEAD);
    each block becomes (x.to(fp32) * scale) rounded to q's dtype as it is loaded: `dequantize_kv`'s bits. With
    FOLD_SCALES (fast mode) a block is widened exactly to q's dtype instead, and the scales multiply the scores
    and the output: fewer instructions per cached element, other bits.

    QUANT: the output is also quantized for o_proj, whose input [B * Tq, Hq * D] holds row (query t, head hq)
    of sequence b as group hq of token b * Tq + t: `triton_quant`'s 1xD arithmetic on the stored output, into
    xq [B * Tq, Hq * D] and M-major scales xs (strides (1, B * Tq)), the bytes of `quantize_rows_1xG`.

    LSE: each row's logsumexp of its scaled scores in natural-log units (+inf where it sees nothing) into lse
    [B, Hq, Tq], contiguous: from the m and l the output came from, what a fused attention backward reads."""
    # Heaviest causal tiles first (numerics-neutral).
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)
    b = tl.program_id(1) // Hkv
    hk = tl.program_id(1) % Hkv
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    t = rows // G
    hq = hk * G + rows % G
    row_ok = t < Tq
    offs_d = tl.arange(0, D)
    q_offs = b.to(tl.int64) * stride_qb + hq.to(tl.int64) * stride_qh + t.to(tl.int64) * stride_qt
    q = tl.load(q_ptr + q_offs[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    pos = tl.load(pos_ptr + b * stride_pb + t * stride_pt, mask=row_ok, other=-1)
    kv_len = tl.minimum(tl.load(len_ptr + b), S)
    hi = tl.minimum(tl.max(pos, axis=0) + 1, kv_len).to(tl.int32)  # slots any row of the tile may see
    k_base = k_ptr + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    if FP8_KV:
        if SCALE_PER_HEAD:
            k_scale = tl.load(ks_ptr + hk)
            v_scale = tl.load(vs_ptr + hk)
        else:
            k_scale = tl.load(ks_ptr)
            v_scale = tl.load(vs_ptr)
        if FOLD_SCALES:
            qk_scale = qk_scale * k_scale
            out_scale = v_scale

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    # Blocks below `whole` are seen whole by every row the tile stores (none when a row sees nothing): the first
    # pass walks them without masks, the second the rest with them. The masks select nothing there, so every
    # row gets the same bits either way, and every launch (decode or full forward) walks the same blocks.
    lowest = tl.min(tl.where(row_ok, pos, 2147483647), axis=0)
    whole = (tl.maximum(tl.minimum(lowest + 1, kv_len), 0) // BLOCK_N * BLOCK_N).to(tl.int32)
    for masked in tl.static_range(2):
        if masked:
            lo = whole
            top = hi
        else:
            lo = 0
            top = whole
        for start in range(lo, top, BLOCK_N):
            slots = start + tl.arange(0, BLOCK_N)
            slot_ok = slots < kv_len
            k = _kv_block(k_base, slots, stride_ks, offs_d, slot_ok, masked)
            if FP8_KV:
                k = _widen_kv(k, k_scale, q_ptr.dtype.element_ty, FOLD_SCALES, INTERPRET)
            s = tl.dot(_mma_operand(q, INTERPRET), _mma_operand(k, INTERPRET).T)
            if masked:  # before the multiplier, so both passes give exp2 the same product to contract into an FMA
                seen = (slots[None, :] <= pos[:, None]) & slot_ok[None, :]
                s = tl.where(seen, s, float("-inf"))
            s = s * qk_scale  # log2 units
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing seen yet: p = 0, no NaN
            alpha = tl.where(m_new == m_i, 1.0, tl.exp2(m_i - m_use))  # exactly 1 when the block adds nothing
            p = tl.exp2(s - m_use[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = _kv_block(v_base, slots, stride_vs, offs_d, slot_ok, masked)
            if FP8_KV:
                v = _widen_kv(v, v_scale, q_ptr.dtype.element_ty, FOLD_SCALES, INTERPRET)
            acc = acc * alpha[:, None]
            acc = tl.dot(_mma_operand(_round(p, v.dtype, INTERPRET), INTERPRET), _mma_operand(v, INTERPRET),
                         acc)
            m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # a padding query (nothing seen) gives zeros
    if FP8_KV:
        if FOLD_SCALES:
            out = out * out_scale
    o_offs = b.to(tl.int64) * stride_ob + hq.to(tl.int64) * stride_oh + t.to(tl.int64) * stride_ot
    out = _round(out, o_ptr.dtype.element_ty, INTERPRET)
    tl.store(o_ptr + o_offs[:, None] + offs_d[None, :], out, mask=row_ok[:, None])
    if LSE:
        log2_sum = m_i + tl.log2(tl.where(l_i == 0.0, 1.0, l_i))
        lse = tl.where(l_i == 0.0, float("inf"), log2_sum * 0.6931471805599453)  # ln 2: natural-log units
        tl.store(lse_ptr + (b.to(tl.int64) * (Hkv * G) + hq) * Tq + t, lse, mask=row_ok)
    if QUANT:
        # The tile is read back as stored (the program's own stores, visible after the barrier): nothing above
        # depends on the quantization, so the attention compiles as it does without it (as in
        # triton_fused_quant's `_rms_norm_quant_row`, where reusing registers once changed FMA contraction).
        tl.debug_barrier()
        x = tl.load(o_ptr + o_offs[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0).to(tl.float32)
        scale = _scale_from_amax(_amax(tl.abs(x), 1), FMAX, RFMAX, POW2)
        quotient = _quotient(x, scale[:, None], _reciprocal(scale, POW2)[:, None], POW2, False)
        token = b.to(tl.int64) * Tq + t
        tl.store(xq_ptr + (token * (Hkv * G) + hq)[:, None] * D + offs_d[None, :],
                 _to_fp8(quotient, xq_ptr.dtype.element_ty, MBITS, EMIN, EXACT_ROUND), mask=row_ok[:, None])
        tl.store(xs_ptr + token + hq.to(tl.int64) * (tl.num_programs(1) // Hkv) * Tq, scale, mask=row_ok)


@triton.jit
def _widen_kv(x, scale, dtype: tl.constexpr, FOLD_SCALES: tl.constexpr, INTERPRET: tl.constexpr):
    """An FP8 block in q's dtype: (x * scale) rounded once (`dequantize_kv`), or with FOLD_SCALES x alone (exact:
    e4m3 values are bf16 and fp16 values). Widening to fp16 instead (one cvt per pair on sm_90, with q in fp16)
    measured 5-9% slower (2026-12-01, fifth session)."""
    if FOLD_SCALES:
        y = _round(x.to(tl.float32), dtype, INTERPRET)
    else:
        y = _round(x.to(tl.float32) * scale, dtype, INTERPRET)
    return y


def attention_quantize_fits(d: int, fmt: QuantFormat) -> bool:
    """Whether the attention kernel can quantize its output for o_proj (`quantize=`): 1xG FP8 groups along K of
    exactly one head (G = D), so each row of an output tile is one group."""
    return (fmt.is_quantized and fmt.granularity is Granularity.GROUP and fmt.axis is Axis.K
            and fmt.group == d)


def _check_attention(q, k, v, q_pos, kv_len, k_scale=None, v_scale=None, quantize=None):
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4 or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit "
                         "[B, Hq, Tq, D] and [B, Hkv, S, D]")
    b, hq, tq, d = q.shape
    if hq % k.shape[1]:
        raise ValueError(f"attention: {hq} query heads are not a multiple of {k.shape[1]} kv heads")
    if q_pos.shape != (b, tq) or kv_len.shape != (b,):
        raise ValueError(f"attention: q_pos {tuple(q_pos.shape)} must be [B, Tq] = {(b, tq)}, kv_len "
                         f"{tuple(kv_len.shape)} must be [{b}]")
    fp8 = k.dtype == v.dtype == FP8_KV_DTYPE and k_scale is not None and v_scale is not None
    if d < 16 or d & (d - 1) or q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != v.dtype \
            or not (fp8 or k.dtype == q.dtype):
        raise UnsupportedError(f"triton attention takes a power-of-two head dim >= 16 and one bf16/fp16 dtype "
                               f"(or float8_e4m3fn k/v with their scales), got D={d}, {q.dtype}/{k.dtype}/{v.dtype}")
    for scale in (k_scale, v_scale) if fp8 else ():
        if scale.numel() not in (1, k.shape[1]):
            raise ValueError(f"attention: a KV scale has {scale.numel()} entries; expected 1 or {k.shape[1]}")
    if quantize is not None and not attention_quantize_fits(d, quantize):
        raise UnsupportedError(f"attention quantizes its output in 1xG FP8 groups of one head (1x{d}), not "
                               f"{quantize.describe()}")


def attention_forward(q, k, v, q_pos, kv_len, *, scale: float, k_scale=None, v_scale=None, fast: bool = False,
                      quantize: QuantFormat | None = None,
                      logsumexp: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, Quantized]:
    """The kernel launch, no autograd (shapes as in `attention`). `fast`: fast mode's launch (FAST_BLOCK_M rows
    per program at decode, FOLD_SCALES for an FP8 cache): not batch-invariant, the bits of no other launch.
    `quantize` (a format `attention_quantize_fits`): (out, Q(out) as o_proj reads it), as in `attention`.
    `logsumexp`: a contiguous fp32 [B, Hq, Tq] the kernel fills with each query's natural-log logsumexp of its
    scaled scores, +inf where it sees nothing (the output's bits are the same with it or without)."""
    b, hq, tq, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    g = hq // hkv
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    q_pos = q_pos.to(device=q.device, dtype=torch.int64)
    kv_len = kv_len.to(device=q.device, dtype=torch.int64).contiguous()
    out = torch.empty((b, hq, tq, d), dtype=q.dtype, device=q.device)
    if quantize is None:
        xq = xs = out  # never read
        quant = _NO_QUANT
    else:
        xq = torch.empty((b * tq, hq * d), dtype=fp8_dtype(quantize), device=q.device)
        xs = torch.empty((hq, b * tq), dtype=torch.float32, device=q.device).t()  # M-major, as quantize_rows
        quant = _fmt_args(quantize, None)
    if logsumexp is not None and (logsumexp.shape != (b, hq, tq) or logsumexp.dtype != torch.float32
                                  or not logsumexp.is_contiguous()):
        raise ValueError(f"attention: logsumexp must be a contiguous fp32 {(b, hq, tq)}, got "
                         f"{tuple(logsumexp.shape)} {logsumexp.dtype}")
    result = out if quantize is None else (out, Quantized(xq, xs, quantize))
    if out.numel() == 0:
        return result
    fp8 = k.dtype == FP8_KV_DTYPE
    if fp8:
        k_scale, v_scale = (t.to(device=q.device, dtype=torch.float32).reshape(-1).contiguous()
                            for t in (k_scale, v_scale))
    else:
        k_scale = v_scale = kv_len  # never read
    block_m, block_n, warps, max_regs = _attention_tiles(fast, g * tq, fp8)
    stages = ATTN_DECODE_STAGES if tq == 1 else ATTN_STAGES
    cap = {"maxnreg": max_regs} if max_regs and not TRITON_INTERPRET else {}
    grid = (triton.cdiv(g * tq, block_m), b * hkv)
    _attention_kernel[grid](
        q, k, v, out, xq, xs, out if logsumexp is None else logsumexp, q_pos, kv_len, k_scale, v_scale,
        scale * LOG2E, tq, s, hkv,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        q_pos.stride(0), q_pos.stride(1),
        G=g, D=d, BLOCK_M=block_m, BLOCK_N=block_n, FP8_KV=fp8, SCALE_PER_HEAD=fp8 and k_scale.numel() > 1,
        FOLD_SCALES=fp8 and fast, INTERPRET=TRITON_INTERPRET, LSE=logsumexp is not None,
        QUANT=quantize is not None, **quant,
        num_warps=warps, num_stages=stages, **cap,
    )
    return result


def _attention_tiles(fast: bool, rows: int, fp8: bool) -> tuple[int, int, int, int | None]:
    """(rows per program, KV slots per step, warps, register cap) of a launch whose programs hold `rows` = G x Tq
    rows: fast mode's decode launch where they fit its tile, else the batch-invariant launch's (what the twin
    follows)."""
    if fast and rows <= FAST_BLOCK_M:
        return FAST_BLOCK_M, FAST_KV_BLOCK[fp8], FAST_ATTN_WARPS, FAST_ATTN_MAX_REGS[fp8]
    return ATTN_BLOCK_M, KV_BLOCK, ATTN_WARPS, None


def _cached_slots(k, v, kv_len, g):
    """k, v with slots >= kv_len zeroed (a preallocated cache may hold NaN there) and kv heads repeated g times."""
    filled = (torch.arange(k.shape[2], device=k.device) < kv_len[:, None])[:, None, :, None]
    return (torch.where(filled, t, 0).repeat_interleave(g, 1) for t in (k, v))


def attention_twin(q, k, v, q_pos, kv_len, *, scale: float, k_scale=None, v_scale=None,
                   fast: bool = False) -> torch.Tensor:
    """The kernel's arithmetic in torch: KV blocks of the launch's size in increasing order, fp32 online softmax in log2
    units, p rounded to v's dtype before the P @ V product, every block of the cache visited (the extra
    blocks change nothing, which is the property the kernel relies on). An FP8 k/v is dequantized first, or
    with `fast` widened exactly, k_scale folded into the score multiplier and v_scale applied to the output."""
    b, hq, tq, d = q.shape
    out_dtype, fp8 = q.dtype, k.dtype == FP8_KV_DTYPE
    qk_scale = torch.tensor(scale * LOG2E, dtype=torch.float32)
    out_scale = None
    if fp8 and fast:
        per_head = (lambda t: t.to(device=q.device, dtype=torch.float32).reshape(-1)
                    .repeat_interleave(hq // k.shape[1] if t.numel() > 1 else 1).reshape(1, -1, 1, 1))
        qk_scale, out_scale = qk_scale.to(q.device) * per_head(k_scale), per_head(v_scale)
        k, v = k.to(q.dtype), v.to(q.dtype)
    elif k.dtype == FP8_KV_DTYPE:
        k, v = _dequantized(k, k_scale, q.dtype), _dequantized(v, v_scale, q.dtype)
    s = k.shape[2]
    kf, vf = (t.float() for t in _cached_slots(k, v, kv_len, hq // k.shape[1]))
    seen = visible_slots(q_pos, kv_len, s)[:, None]
    qf = q.float()
    m_i = torch.full((b, hq, tq, 1), float("-inf"), device=q.device)
    l_i = torch.zeros(b, hq, tq, 1, device=q.device)
    acc = torch.zeros(b, hq, tq, d, device=q.device)
    block = _attention_tiles(fast, hq // k.shape[1] * tq, fp8)[1]
    for lo in range(0, s, block):
        blk = slice(lo, lo + block)
        ok = seen[..., blk]
        sc = torch.where(ok, qf @ kf[:, :, blk].transpose(-1, -2), float("-inf")) * qk_scale.to(q.device)
        m_new = torch.maximum(m_i, sc.amax(-1, keepdim=True))
        m_use = torch.where(m_new == float("-inf"), 0.0, m_new)
        alpha = torch.where(m_new == m_i, 1.0, torch.exp2(m_i - m_use))
        p = torch.exp2(sc - m_use)
        l_i = l_i * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + p.to(v.dtype).float() @ vf[:, :, blk]
        m_i = m_new
    out = acc / torch.where(l_i == 0, 1.0, l_i)
    return (out if out_scale is None else out * out_scale).to(out_dtype)


def _dequantized(states, scale, dtype):
    """`numerics.kv_cache.dequantize_kv`: (fp8 -> fp32) * scale ([] or [H]), rounded once to dtype."""
    return (states.float() * scale.to(device=states.device, dtype=torch.float32).reshape(1, -1, 1, 1)).to(dtype)


def attention_reference(q, k, v, q_pos, kv_len, *, scale: float) -> torch.Tensor:
    """Plain masked softmax attention in max(q.dtype, fp32), differentiable; zeros for a query that sees nothing.
    The float64 reference of the tests, and (one kv-head group at a time) the backward's recomputation."""
    acc_dtype = torch.promote_types(q.dtype, torch.float32)
    kf, vf = (t.to(acc_dtype) for t in _cached_slots(k, v, kv_len, q.shape[1] // k.shape[1]))
    sc = (q.to(acc_dtype) @ kf.transpose(-1, -2)) * scale
    sc = sc.masked_fill(~visible_slots(q_pos, kv_len, k.shape[2])[:, None], float("-inf"))
    m = sc.detach().amax(-1, keepdim=True)
    p = torch.exp(sc - torch.where(torch.isfinite(m), m, 0.0))
    l = p.sum(-1, keepdim=True)
    return (p @ vf) / torch.where(l == 0, 1.0, l)


class _Attention(torch.autograd.Function):
    """Forward: the batch-invariant kernel. Backward (not bitwise, need not be): PyTorch's fused SDPA recomputed
    in q's dtype with the same visibility mask, GQA as G x T queries per kv head (k and v read once). The fp32
    recomputation this replaces materialised every T x S score matrix one kv head at a time: it made the 8B
    decoder layer's batch-invariant backward 3x its fast one on the H200 (BENCHMARKS.md, bench block).
    With `quantize`, the FP8 data and scales are outputs too, without a gradient. With `causal` (`attention`), the
    backward is a fused one over the triangle, no mask: from the kernel's own output and logsumexp
    (`causal_backward_from_lse`, the forward not run again) where `lse_backward_fits`, else `causal_sdpa`
    recomputed."""

    @staticmethod
    def forward(ctx, q, k, v, q_pos, kv_len, scale, quantize, causal):
        ctx.scale, ctx.causal = scale, causal
        lse = None
        if causal and lse_backward_fits(q, k, v):
            lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
        result = attention_forward(q, k, v, q_pos, kv_len, scale=scale, quantize=quantize, logsumexp=lse)
        out = result if quantize is None else result[0]
        ctx.save_for_backward(q, k, v, q_pos, kv_len, *(() if lse is None else (out, lse)))
        if quantize is None:
            return out
        xq = result[1]
        ctx.mark_non_differentiable(xq.data, xq.scale)
        return out, xq.data, xq.scale

    @staticmethod
    def backward(ctx, grad, *_quantized):
        q, k, v, q_pos, kv_len, *from_lse = ctx.saved_tensors
        if from_lse and q.is_cuda and backward_inputs_fit(grad, k, v, q_pos, kv_len):  # the masks below, fused
            grad, kz, vz = backward_inputs(grad.to(q.dtype), k, v, q_pos, kv_len, from_lse[0])
            gq, gk, gv = causal_backward_from_lse(grad, q, kz, vz, *from_lse, scale=ctx.scale)
            return gq, gk, gv, None, None, None, None, None
        blind = (q_pos < 0) | (kv_len[:, None] < 1)  # queries that see no slot: output 0, no gradient
        grad = grad.masked_fill(blind[:, None, :, None], 0)
        filled = (torch.arange(k.shape[2], device=k.device) < kv_len[:, None])[:, None, :, None]
        if from_lse:  # a blind query's logsumexp is +inf: its probabilities are 0 and it adds nothing to dk, dv
            kz, vz = torch.where(filled, k, 0), torch.where(filled, v, 0)
            gq, gk, gv = causal_backward_from_lse(grad.to(q.dtype), q, kz, vz, *from_lse, scale=ctx.scale)
            return gq, gk, gv, None, None, None, None, None
        with torch.enable_grad():
            qh, kh, vh = (x.detach().requires_grad_() for x in (q, k, v))
            # slots past kv_len may hold anything (a preallocated cache): zeros, as the forward reads them
            kz, vz = torch.where(filled, kh, 0), torch.where(filled, vh, 0)
            if ctx.causal:
                out = causal_sdpa(qh, kz, vz, scale=ctx.scale)
            else:
                out = masked_sdpa(qh, kz, vz, visible_slots(q_pos, kv_len, k.shape[2]), scale=ctx.scale)
            gq, gk, gv = torch.autograd.grad(out, (qh, kh, vh), grad.to(out.dtype))
        return gq, gk, gv, None, None, None, None, None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor, kv_len: torch.Tensor, *,
              scale: float, k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
              fast: bool = False, quantize: QuantFormat | None = None,
              causal: bool = False) -> torch.Tensor | tuple[torch.Tensor, Quantized]:
    """Causal attention of q[B, Hq, Tq, D] over a position-indexed cache k, v [B, Hkv, S, D] (CONTRACTS.md):
    query i of sequence b sees slots j <= q_pos[b, i], j < kv_len[b]; q_pos < 0 marks padding (zeros out).

    k, v may be an FP8 cache (float8_e4m3fn) with dequant multipliers k_scale, v_scale of shape [] or [Hkv]:
    the kernel dequantizes each block as it loads it, with the bits of `numerics.kv_cache.dequantize_kv`, so a
    decode step reads one byte per cached element and only the blocks it attends to (no autograd: a cache).
    `fast`: fast mode's launch, not batch-invariant and without autograd (`attention_forward`).

    `quantize` (1xD FP8, `attention_quantize_fits`): returns (out, Q) with Q the bytes and scales of
    `quantize_rows_1xG(out.transpose(1, 2).reshape(B * Tq, Hq * D), quantize)`, o_proj's input quantized by
    the kernel's epilogue, which saves the decoder the quantizer's launch; out's bits are unchanged.

    `causal`: the caller's word that query i sits at position i below kv_len or is padding (a teacher-forcing
    forward, Tq = S), so that the backward may run a fused causal backward over the triangle, from the kernel's
    logsumexp or recomputed (`_Attention`)."""
    _check_attention(q, k, v, q_pos, kv_len, k_scale, v_scale, quantize)
    if causal and q.shape[2] != k.shape[2]:
        raise ValueError(f"attention: causal takes as many queries as slots, got Tq={q.shape[2]}, S={k.shape[2]}")
    kw = dict(scale=scale, k_scale=k_scale, v_scale=v_scale, quantize=quantize)
    if fast:
        return attention_forward(q, k, v, q_pos, kv_len, fast=True, **kw)
    if k.dtype != FP8_KV_DTYPE and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                                                 or v.requires_grad):
        if quantize is None:
            return _Attention.apply(q, k, v, q_pos, kv_len, scale, None, causal)
        out, data, xs = _Attention.apply(q, k, v, q_pos, kv_len, scale, quantize, causal)
        return out, Quantized(data, xs, quantize)
    return attention_forward(q, k, v, q_pos, kv_len, **kw)
