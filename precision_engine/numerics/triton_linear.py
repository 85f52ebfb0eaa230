"""The batch-invariant BF16/FP16 linear (x @ W^T + bias, fp32 accumulate) in Triton: ONE tile shape and warp count
for every M, so each output element runs the same tensor-core instructions. K is walked in BLOCK_K steps in
increasing order, grouped into segments of `segment_kb(N, K)` steps, a function of the weight shape only: each
segment is accumulated from zero and the segment sums are added in increasing order from zero, then the bias,
then one rounding. Decode sizes run one program per (tile, segment) with the in-order sum done by each tile's
last program (split-K, so a weight is streamed by enough programs); large M, and decode against a weight of >=
WHOLE_TILES_MIN tiles (the fused gate/up: 62 us where split-K took 74 at M = 64 on the H200,
scripts/decode_sweep.py --bf16-invariant), runs all segments in one program (optionally a persistent one). Both
do the same additions in the same order, so the launch shape is performance only.

`linear_twin` spells out the same arithmetic in torch. The backward is not batch-invariant and need not be
(only forward logprobs are compared): dgrad and wgrad are torch matmuls (cuBLAS).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from precision_engine.errors import UnsupportedError
from precision_engine.numerics.contract import TRITON_INTERPRET
from precision_engine.numerics.cuda_context import make_context_current
from precision_engine.numerics.triton_exact import _mma_operand, _round
from precision_engine.numerics.triton_gemm import WHOLE_TILES_MIN, _sm_count, _sum_if_last, _tile_counters


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

        make_context_current(x.device)  # the launch encodes the descriptors here (`cuda_context`)
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
