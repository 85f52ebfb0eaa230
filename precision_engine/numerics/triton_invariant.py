"""Batch-invariant Triton kernels for CUDA tensors: `linear`, `rms_norm`, `attention`, `log_softmax`.

`numerics/invariant.py` dispatches here for CUDA tensors (signatures as in CONTRACTS.md). Each op gives a row
the same bits whatever else shares the call, because no choice that changes arithmetic depends on the number
of rows, their order or padding:

- `linear` (x @ W^T, bf16/fp16 in, fp32 accumulate): ONE tile shape and warp count for every M, so each output
  element runs the same tensor-core instructions. K is walked in BLOCK_K steps in increasing order, grouped into
  segments of `segment_kb(N, K)` steps, a function of the weight shape only: each segment is accumulated from
  zero and the segment sums are added in increasing order from zero, then the bias, then one rounding. Decode
  sizes run one program per (tile, segment) with the in-order sum done by each tile's last program (split-K,
  so a weight is streamed by enough programs); large M, and decode against a weight of >= WHOLE_TILES_MIN
  tiles (the fused gate/up: 62 us where split-K took 74 at M = 64 on the H200, scripts/decode_sweep.py
  --bf16-invariant), runs all segments in one program (optionally a persistent one). Both do the same additions in the same order, so the launch shape is performance only.
- `attention`: ONE kernel for decode (a few queries against the position-indexed cache) and the full causal
  forward. A program owns BLOCK_M rows of (query, head of a GQA group) of one (sequence, kv head) and walks KV
  blocks of KV_BLOCK slots from slot 0 upwards with an fp32 online softmax. A row's state only changes through
  its own scores; a block that is fully masked for a row (the tile's other rows needed it) leaves m, l and
  the accumulator exactly as they were (alpha = 1, p = 0), so a query gets the same bits in both modes.
  The kernel also reads an FP8 KV cache in place, dequantizing each block as it loads it (decode reads one
  byte per cached element instead of a BF16 copy made per step), and may quantize its output for o_proj in its
  epilogue. `attention(..., fast=True)` is fast mode's launch of the same kernel and NOT batch-invariant:
  16-row decode tiles, an FP8 cache widened exactly with its scales on the scores and the output.
- `rope_qk`: RoPE of q and k in one launch, the bits of `rope`.
- `rms_norm`: one program per row, a fixed block size and warp count per row length.
- `log_softmax`: re-exported from `numerics.triton_sampling` (a fixed split of each row into vocabulary
  chunks, shared with the fused sampler).

Each kernel has a pure-torch twin here (`*_twin`) that spells out the same arithmetic in torch ops; the tests
check kernel against twin and both against float64 (tests/numerics/test_triton_invariant.py, in Triton's CPU
interpreter; full sizes in tests/numerics/gpu/test_triton_invariant_gpu.py).

Backward passes are not batch-invariant and need not be (only forward logprobs are compared): linear's dgrad
and wgrad are torch matmuls (cuBLAS); rms_norm recomputes its forward in plain fp32 torch from the saved
inputs and differentiates that; attention differentiates PyTorch's fused SDPA under the same mask; log_softmax's gradient is computed from its saved fp32 output; rope's is the
transposed rotation of the output gradient in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from precision_engine.errors import UnsupportedError
from precision_engine.numerics.contract import TRITON_INTERPRET, Quantized, fp8_dtype
from precision_engine.numerics.formats import Axis, Granularity, QuantFormat
from precision_engine.numerics.triton_gemm import WHOLE_TILES_MIN, _sm_count, _sum_if_last, _tile_counters
from precision_engine.numerics.masked_attention import masked_sdpa, visible_slots
from precision_engine.numerics.triton_quant import (
    _amax,
    _fmt_args,
    _quotient,
    _reciprocal,
    _round_to_fp8_grid,
    _rowmajor,
    _scale_from_amax,
    _to_fp8,
)

LOG2E = 1.4426950408889634
FP8_KV_DTYPE = torch.float8_e4m3fn  # numerics.kv_cache.KV_FP8_DTYPE, the cache attention reads in place


# ---------------------------------------------------------------------------------------------------- linear

@dataclass(frozen=True)
class LinearConfig:
    """The launch of `linear`. block_* and num_warps fix the instructions, so they are one value for every M
    (changing them may change bits, never invariance); num_stages, group_m and persistent are scheduling."""

    block_m: int = 64
    block_n: int = 128
    # 128-wide K steps: at M = 64 on the H200 the split-K launches of q/k/v, o and down_proj took 25, 17 and
    # 37 us where 64-wide steps took 31, 22 and 45 (cuBLAS 17, 12, 37; scripts/decode_sweep.py --bf16-tiles,
    # 2026-12-01, every variant row-invariant); 4 stages of 48 KB.
    block_k: int = 128
    num_warps: int = 4  # one warpgroup: wgmma m64 on the H200 for every M (the FP8 kernel's 64x128 choice)
    num_stages: int = 4
    group_m: int = 8
    persistent: bool = False  # large M: one program per SM looping over tiles


LINEAR = LinearConfig()
BLOCK_K = LINEAR.block_k
SMALL_M_MAX = 64  # at or below: split-K launch (decode) unless the weight is wide; above, one program per tile
# Segments: the smallest power of two giving >= _SPLIT_PROGRAMS programs of block_n-wide weight tiles while
# every segment keeps >= _MIN_SEGMENT_KB K steps (1024 K elements: a large-M program pays one accumulator
# restart per segment). A function of (N, K) only. With one 192 KB program per SM, 128 programs fill the
# H200's 132 SMs: 4 segments of 1024 for the 4096-wide projections, 4 of 3584 for down_proj.
_SPLIT_PROGRAMS = 128
_MIN_SEGMENT_KB = 8


def segment_kb(n: int, k: int) -> int:
    """K steps (of BLOCK_K) per segment for x[M, K] @ W[N, K]^T: depends on (N, K) only, never on M."""
    num_kb = triton.cdiv(k, BLOCK_K)
    tiles = triton.cdiv(n, LINEAR.block_n)
    segments = 1
    while tiles * segments < _SPLIT_PROGRAMS and num_kb // (2 * segments) >= _MIN_SEGMENT_KB:
        segments *= 2
    return triton.cdiv(num_kb, segments)


@triton.jit
def _tile_coords(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped tile order so that neighbouring programs share operand tiles in L2; numerics-neutral."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n
    first_m = (tile // per_group) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    return (first_m + (tile % per_group) % rows) * BLOCK_M, ((tile % per_group) // rows) * BLOCK_N


@triton.jit
def _mma_operand(x, INTERPRET: tl.constexpr):
    """Triton's CPU interpreter multiplies bf16 tiles as raw uint16 (triton 3.9): there, and only there, the
    tile goes to the dot in fp32, which holds every bf16 product exactly, as the tensor cores do."""
    if INTERPRET:
        y = x.to(tl.float32)
    else:
        y = x
    return y


@triton.jit
def _round(x, dtype: tl.constexpr, INTERPRET: tl.constexpr):
    """fp32 -> dtype, round to nearest even (the GPU's cvt.rn). The interpreter's fp32 -> bf16 cast truncates
    or mis-rounds (triton 3.9), so there the rounding is done on the bits, as torch does it."""
    if dtype == tl.float32:
        y = x
    elif INTERPRET:
        if dtype == tl.bfloat16:
            u = x.to(tl.uint32, bitcast=True)
            bits = tl.where(x != x, 0x7FC0, (u + 0x7FFF + ((u >> 16) & 1)) >> 16)
            y = bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)
        else:
            y = x.to(dtype)
    else:
        y = x.to(dtype)
    return y


@triton.jit
def _segment_sum(x_src, w_src, off_m, off_n, kb_lo, kb_hi, M, N, K, stride_xm, stride_wn,
                 TMA: tl.constexpr, INTERPRET: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    """sum over K steps kb_lo..kb_hi-1, in increasing order, of x_tile @ w_tile^T, from a zero fp32 tile."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    for kb in range(kb_lo, kb_hi):
        if TMA:  # out-of-range rows, columns and K are zero-filled by the copy engine
            a = x_src.load([off_m, kb * BLOCK_K])
            b = w_src.load([off_n, kb * BLOCK_K])
        else:
            ks = kb * BLOCK_K + offs_k
            a = tl.load(x_src + offs_m[:, None].to(tl.int64) * stride_xm + ks[None, :],
                        mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
            b = tl.load(w_src + offs_n[:, None].to(tl.int64) * stride_wn + ks[None, :],
                        mask=(offs_n[:, None] < N) & (ks[None, :] < K), other=0.0)
        acc = tl.dot(_mma_operand(a, INTERPRET), _mma_operand(b, INTERPRET).T, acc)
    return acc


@triton.jit
def _store_tile(c_ptr, bias_ptr, total, off_m, off_n, M, N, HAS_BIAS: tl.constexpr, INTERPRET: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    if HAS_BIAS:
        total += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    out = _round(total, c_ptr.dtype.element_ty, INTERPRET)
    tl.store(c_ptr + offs_m[:, None].to(tl.int64) * N + offs_n[None, :], out, mask=mask)


@triton.jit
def _whole_tile(x_src, w_src, c_ptr, bias_ptr, tile, M, N, K, SEG_KB, stride_xm, stride_wn,
                HAS_BIAS: tl.constexpr, TMA: tl.constexpr, INTERPRET: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """One output tile, all segments in one program: ((0 + seg_0) + seg_1) + ..., the split launch's sums."""
    off_m, off_n = _tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    num_kb = tl.cdiv(K, BLOCK_K)
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb_lo in range(0, num_kb, SEG_KB):
        total += _segment_sum(x_src, w_src, off_m, off_n, kb_lo, min(kb_lo + SEG_KB, num_kb), M, N, K,
                              stride_xm, stride_wn, TMA, INTERPRET, BLOCK_M, BLOCK_N, BLOCK_K)
    _store_tile(c_ptr, bias_ptr, total, off_m, off_n, M, N, HAS_BIAS, INTERPRET, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["M"])
def _linear_kernel(x_src, w_src, c_ptr, ws_ptr, count_ptr, bias_ptr, M, N, K, SEG_KB, stride_xm, stride_wn,
                   HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr, PERSISTENT: tl.constexpr, TMA: tl.constexpr,
                   INTERPRET: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr):
    """c[M, N] (contiguous) = x @ w^T (+ bias): total = ((0 + seg_0) + seg_1) + ..., + bias, rounded once."""
    if SPLIT:
        # One segment per program; its fp32 sum goes to ws[segment] (laid out like c) and the tile's last
        # program to arrive adds the segments in increasing order.
        tile = tl.program_id(0)
        seg = tl.program_id(1)
        num_kb = tl.cdiv(K, BLOCK_K)
        off_m, off_n = _tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _segment_sum(x_src, w_src, off_m, off_n, seg * SEG_KB, min(seg * SEG_KB + SEG_KB, num_kb), M, N, K,
                           stride_xm, stride_wn, TMA, INTERPRET, BLOCK_M, BLOCK_N, BLOCK_K)
        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        ws_offs = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
        tl.store(ws_ptr + seg.to(tl.int64) * M * N + ws_offs, acc, mask=mask)
        last, total = _sum_if_last(ws_ptr, count_ptr, tile, ws_offs, mask, M * N, BLOCK_M, BLOCK_N)
        if last:
            _store_tile(c_ptr, bias_ptr, total, off_m, off_n, M, N, HAS_BIAS, INTERPRET, BLOCK_M, BLOCK_N)
    else:
        if PERSISTENT:
            num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
            for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):
                _whole_tile(x_src, w_src, c_ptr, bias_ptr, tile, M, N, K, SEG_KB, stride_xm, stride_wn,
                            HAS_BIAS, TMA, INTERPRET, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
        else:
            _whole_tile(x_src, w_src, c_ptr, bias_ptr, tl.program_id(0), M, N, K, SEG_KB, stride_xm, stride_wn,
                        HAS_BIAS, TMA, INTERPRET, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)


def _tma_ok(x: torch.Tensor) -> bool:
    """The copy engine needs a contiguous last dim and 16-byte aligned rows and base."""
    return x.stride(1) == 1 and (x.stride(0) * x.element_size()) % 16 == 0 and x.data_ptr() % 16 == 0


def linear_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                   split: bool | None = None, config: LinearConfig = LINEAR) -> torch.Tensor:
    """x[M, K] @ weight[N, K]^T (+ bias) -> [M, N] in x.dtype, no autograd. `split` (default: by M and the
    SM count) and config's scheduling fields choose the launch only; the bits are those of any other launch."""
    m, k = x.shape
    n = weight.shape[0]
    if x.stride(1) != 1:
        x = x.contiguous()
    weight = weight if weight.stride(1) == 1 else weight.contiguous()
    c = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return c
    if k == 0:
        return c.zero_() if bias is None else c.copy_(bias.expand(m, n))
    seg = segment_kb(n, k)
    segments = triton.cdiv(triton.cdiv(k, config.block_k), seg)
    tiles = triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n)
    sms = _sm_count(x.device.index or 0) if x.is_cuda else 4
    if split is None:  # decode splits K unless the weight's tiles alone give the SMs work (fused gate/up)
        split = (m <= SMALL_M_MAX and triton.cdiv(n, config.block_n) < WHOLE_TILES_MIN) or tiles < sms
    split = split and segments > 1
    tma = _tma_ok(x) and _tma_ok(weight)
    if tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        x_src = TensorDescriptor.from_tensor(x, [config.block_m, config.block_k])
        w_src = TensorDescriptor.from_tensor(weight, [config.block_n, config.block_k])
    else:
        x_src, w_src = x, weight
    ws = torch.empty((segments, m, n), dtype=torch.float32, device=x.device) if split else c
    counters = _tile_counters(x.device, tiles) if split else c
    persistent = config.persistent and not split
    grid = (tiles, segments) if split else (min(tiles, sms) if persistent else tiles, 1)
    _linear_kernel[grid](
        x_src, w_src, c, ws, counters, bias if bias is not None else c, m, n, k, seg, x.stride(0), weight.stride(0),
        HAS_BIAS=bias is not None, SPLIT=split, PERSISTENT=persistent, TMA=tma, INTERPRET=TRITON_INTERPRET,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return c


def linear_twin(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The kernel's arithmetic in torch: fp32 K steps chained within a segment, segments summed in order."""
    n, k = weight.shape
    x2, w = x.reshape(-1, k).float(), weight.float()
    seg = segment_kb(n, k) * BLOCK_K
    total = torch.zeros(x2.shape[0], n, dtype=torch.float32, device=x.device)
    for lo in range(0, k, seg):
        acc = torch.zeros_like(total)
        for kb in range(lo, min(lo + seg, k), BLOCK_K):
            acc = acc + x2[:, kb:kb + BLOCK_K] @ w[:, kb:kb + BLOCK_K].T
        total = total + acc
    if bias is not None:
        total = total + bias.float()
    return total.to(x.dtype).reshape(*x.shape[:-1], n)


class _Linear(torch.autograd.Function):
    """Forward: the batch-invariant kernel. Backward: torch matmuls (cuBLAS; not batch-invariant, need not be)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return linear_forward(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad = grad.to(x.dtype)
        gx = grad @ weight if ctx.needs_input_grad[0] else None
        gw = grad.t() @ x if ctx.needs_input_grad[1] else None
        gb = grad.float().sum(0).to(weight.dtype) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return gx, gw, gb


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x[..., K] @ weight[N, K]^T (+ bias) -> [..., N] in x.dtype, fp32 accumulation, batch-invariant rows."""
    if x.dtype not in (torch.bfloat16, torch.float16) or weight.dtype != x.dtype:
        raise UnsupportedError(f"triton linear takes bf16 or fp16 x and weight of one dtype, got {x.dtype} and "
                               f"{weight.dtype}")
    if x.shape[-1] != weight.shape[1] or (bias is not None and bias.shape != (weight.shape[0],)):
        raise ValueError(f"linear: x {tuple(x.shape)}, weight {tuple(weight.shape)}, "
                         f"bias {None if bias is None else tuple(bias.shape)} do not fit")
    x2 = x.reshape(-1, x.shape[-1])
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
    out = _Linear.apply(x2, weight, bias) if needs_grad else linear_forward(x2, weight, bias)
    return out.reshape(*x.shape[:-1], weight.shape[0])


# -------------------------------------------------------------------------------------------------- rms_norm

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


# ----------------------------------------------------------------------------------------------- log_softmax
# The kernels live in numerics/triton_sampling.py beside the sampler that shares their row statistics.

from precision_engine.numerics.triton_sampling import log_softmax, log_softmax_twin  # noqa: E402


# ------------------------------------------------------------------------------------------------------ rope

@triton.jit
def _round_opaque(x, dtype: tl.constexpr, INTERPRET: tl.constexpr):
    """fp32 -> bf16/fp16, round to nearest even, as one cvt.rn the compiler cannot fold into the surrounding
    arithmetic (`_round` in the interpreter, which has no inline PTX)."""
    if INTERPRET:
        y = _round(x, dtype, INTERPRET)
    elif dtype == tl.bfloat16:
        y = tl.inline_asm_elementwise("cvt.rn.bf16.f32 $0, $1;", "=h,r", [x], dtype=tl.bfloat16, is_pure=True,
                                      pack=1)
    else:
        y = tl.inline_asm_elementwise("cvt.rn.f16.f32 $0, $1;", "=h,r", [x], dtype=tl.float16, is_pure=True,
                                      pack=1)
    return y


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


# -------------------------------------------------------------------------------------------------- kv write

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


# ------------------------------------------------------------------------------------------------- attention

ATTN_BLOCK_M = 64  # rows (query, head of the GQA group) per program, in decode and in the full forward alike
KV_BLOCK = 64  # KV slots per online-softmax step, walked from slot 0 upwards
ATTN_WARPS = 4
ATTN_STAGES = 2
# A decode step (one query per row) pipelines 3 KV blocks: bitwise the same, 2-4 us a layer faster at 256-384
# cached tokens on the H200 (scripts/decode_sweep.py --attention); the full forward keeps 2.
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


@triton.jit(do_not_specialize=["pos_ptr", "len_ptr", "Tq", "S", "stride_pb", "stride_pt"])
def _attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, xq_ptr, xs_ptr, pos_ptr, len_ptr, ks_ptr, vs_ptr, qk_scale, Tq,
                      S, Hkv, stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_ks,
                      stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_ot, stride_pb, stride_pt,
                      G: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      FP8_KV: tl.constexpr, SCALE_PER_HEAD: tl.constexpr, FOLD_SCALES: tl.constexpr,
                      INTERPRET: tl.constexpr, QUANT: tl.constexpr, FMAX: tl.constexpr, RFMAX: tl.constexpr,
                      MBITS: tl.constexpr, EMIN: tl.constexpr, POW2: tl.constexpr, EXACT_ROUND: tl.constexpr):
    """Rows r of one (sequence, kv head): query r // G, query head r % G. Arguments that differ between a decode
    step and the full forward (Tq, S, the positions' layout) are not specialized on: one binary for both.

    FP8_KV: k, v are float8_e4m3fn with fp32 dequant multipliers (one, or one per kv head with SCALE_PER_HEAD);
    each block becomes (x.to(fp32) * scale) rounded to q's dtype as it is loaded: `dequantize_kv`'s bits. With
    FOLD_SCALES (fast mode) a block is widened exactly to q's dtype instead, and the scales multiply the scores
    and the output: fewer instructions per cached element, other bits.

    QUANT: the output is also quantized for o_proj, whose input [B * Tq, Hq * D] holds row (query t, head hq)
    of sequence b as group hq of token b * Tq + t: `triton_quant`'s 1xD arithmetic on the stored output, into
    xq [B * Tq, Hq * D] and M-major scales xs (strides (1, B * Tq)), the bytes of `quantize_rows_1xG`."""
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
    for start in range(0, hi, BLOCK_N):
        slots = start + tl.arange(0, BLOCK_N)
        slot_ok = slots < kv_len  # slots past kv_len may hold anything (NaN): never loaded
        k = tl.load(k_base + slots[:, None] * stride_ks + offs_d[None, :], mask=slot_ok[:, None],
                    other=0.0)
        if FP8_KV:
            k = _widen_kv(k, k_scale, q_ptr.dtype.element_ty, FOLD_SCALES, INTERPRET)
        s = tl.dot(_mma_operand(q, INTERPRET), _mma_operand(k, INTERPRET).T) * qk_scale  # log2 units
        seen = (slots[None, :] <= pos[:, None]) & slot_ok[None, :]
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing seen yet: p = 0, no NaN
        alpha = tl.where(m_new == m_i, 1.0, tl.exp2(m_i - m_use))  # exactly 1 when the block adds nothing
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + slots[:, None] * stride_vs + offs_d[None, :], mask=slot_ok[:, None],
                    other=0.0)
        if FP8_KV:
            v = _widen_kv(v, v_scale, q_ptr.dtype.element_ty, FOLD_SCALES, INTERPRET)
        acc = acc * alpha[:, None]
        acc = tl.dot(_mma_operand(_round(p, v.dtype, INTERPRET), INTERPRET), _mma_operand(v, INTERPRET), acc)
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # a padding query (nothing seen) gives zeros
    if FP8_KV:
        if FOLD_SCALES:
            out = out * out_scale
    o_offs = b.to(tl.int64) * stride_ob + hq.to(tl.int64) * stride_oh + t.to(tl.int64) * stride_ot
    out = _round(out, o_ptr.dtype.element_ty, INTERPRET)
    tl.store(o_ptr + o_offs[:, None] + offs_d[None, :], out, mask=row_ok[:, None])
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
                      quantize: QuantFormat | None = None) -> torch.Tensor | tuple[torch.Tensor, Quantized]:
    """The kernel launch, no autograd (shapes as in `attention`). `fast`: fast mode's launch (FAST_BLOCK_M rows
    per program at decode, FOLD_SCALES for an FP8 cache): not batch-invariant, the bits of no other launch.
    `quantize` (a format `attention_quantize_fits`): (out, Q(out) as o_proj reads it), as in `attention`."""
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
        q, k, v, out, xq, xs, q_pos, kv_len, k_scale, v_scale, scale * LOG2E, tq, s, hkv,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        q_pos.stride(0), q_pos.stride(1),
        G=g, D=d, BLOCK_M=block_m, BLOCK_N=block_n, FP8_KV=fp8, SCALE_PER_HEAD=fp8 and k_scale.numel() > 1,
        FOLD_SCALES=fp8 and fast, INTERPRET=TRITON_INTERPRET, QUANT=quantize is not None, **quant,
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
        sc = torch.where(ok, (qf @ kf[:, :, blk].transpose(-1, -2)) * qk_scale.to(q.device), float("-inf"))
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
    With `quantize`, the FP8 data and scales are outputs too, without a gradient."""

    @staticmethod
    def forward(ctx, q, k, v, q_pos, kv_len, scale, quantize):
        ctx.save_for_backward(q, k, v, q_pos, kv_len)
        ctx.scale = scale
        if quantize is None:
            return attention_forward(q, k, v, q_pos, kv_len, scale=scale)
        out, xq = attention_forward(q, k, v, q_pos, kv_len, scale=scale, quantize=quantize)
        ctx.mark_non_differentiable(xq.data, xq.scale)
        return out, xq.data, xq.scale

    @staticmethod
    def backward(ctx, grad, *_quantized):
        q, k, v, q_pos, kv_len = ctx.saved_tensors
        visible = visible_slots(q_pos, kv_len, k.shape[2])
        grad = grad.masked_fill(~visible.any(-1)[:, None, :, None], 0)  # blind queries: output 0, no gradient
        filled = (torch.arange(k.shape[2], device=k.device) < kv_len[:, None])[:, None, :, None]
        with torch.enable_grad():
            qh, kh, vh = (x.detach().requires_grad_() for x in (q, k, v))
            # slots past kv_len may hold anything (a preallocated cache): zeros, as the forward reads them
            out = masked_sdpa(qh, torch.where(filled, kh, 0), torch.where(filled, vh, 0), visible, scale=ctx.scale)
            gq, gk, gv = torch.autograd.grad(out, (qh, kh, vh), grad.to(out.dtype))
        return gq, gk, gv, None, None, None, None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor, kv_len: torch.Tensor, *,
              scale: float, k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
              fast: bool = False, quantize: QuantFormat | None = None) -> torch.Tensor | tuple[torch.Tensor, Quantized]:
    """Causal attention of q[B, Hq, Tq, D] over a position-indexed cache k, v [B, Hkv, S, D] (CONTRACTS.md):
    query i of sequence b sees slots j <= q_pos[b, i], j < kv_len[b]; q_pos < 0 marks padding (zeros out).

    k, v may be an FP8 cache (float8_e4m3fn) with dequant multipliers k_scale, v_scale of shape [] or [Hkv]:
    the kernel dequantizes each block as it loads it, with the bits of `numerics.kv_cache.dequantize_kv`, so a
    decode step reads one byte per cached element and only the blocks it attends to (no autograd: a cache).
    `fast`: fast mode's launch, not batch-invariant and without autograd (`attention_forward`).

    `quantize` (1xD FP8, `attention_quantize_fits`): returns (out, Q) with Q the bytes and scales of
    `quantize_rows_1xG(out.transpose(1, 2).reshape(B * Tq, Hq * D), quantize)`, o_proj's input quantized by
    the kernel's epilogue, which saves the decoder the quantizer's launch; out's bits are unchanged."""
    _check_attention(q, k, v, q_pos, kv_len, k_scale, v_scale, quantize)
    kw = dict(scale=scale, k_scale=k_scale, v_scale=v_scale, quantize=quantize)
    if fast:
        return attention_forward(q, k, v, q_pos, kv_len, fast=True, **kw)
    if k.dtype != FP8_KV_DTYPE and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                                                 or v.requires_grad):
        if quantize is None:
            return _Attention.apply(q, k, v, q_pos, kv_len, scale, None)
        out, data, xs = _Attention.apply(q, k, v, q_pos, kv_len, scale, quantize)
        return out, Quantized(data, xs, quantize)
    return attention_forward(q, k, v, q_pos, kv_len, **kw)


__all__ = ["KV_BLOCK", "LINEAR", "LinearConfig", "attention", "attention_quantize_fits", "attention_reference",
           "attention_twin", "linear", "linear_forward", "linear_twin", "log_softmax", "log_softmax_twin", "rms_norm",
           "rms_norm_backward", "rms_norm_twin", "kv_write", "rope", "rope_qk", "segment_kb"]
