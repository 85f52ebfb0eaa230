"""Block-scaled FP8 GEMM in Triton: c[M, N] = (a * sa) @ (b * sb)^T, both operands K-major FP8.

Why our own kernel: cuBLAS picks its algorithm (tiling, split-K) from the problem size, so a token's row can
change with the batch it rides in, and at decode sizes (M <= 64) it is slower than BF16. This kernel fixes the
arithmetic of every output element independently of M:

- K is walked in 128-wide blocks; each block's FP8 dot product goes to the tensor cores with a fresh FP32
  accumulator and is scaled by sa[m, kb] * sb[n, kb] before it is added to a running FP32 segment sum.
- The K blocks form segments of `seg_kb` blocks, a function of (N, K) only, never of M. Each segment is summed
  from zero in increasing kb; the segment sums are then added in increasing order, starting from zero. Small M
  runs one program per (tile, segment), FP32 partials to a workspace, then the in-order sum (a second kernel,
  or with fused_sum the tile's last program to arrive): split-K. Large M walks all segments in one program, and
  so does decode against a weight wide enough to give every SM whole tiles, there in a fixed grid of
  persistent programs (`_fp8_persistent_kernel`). All do the same additions in the same order, so a row has
  the same bits at any M.
- AUTO's rule (`segment_kb`) is one segment for every weight, since the sixteenth session: a row's sum is one
  chain over K, chain = fma(block product, sa * sb, chain), which is pinned cuBLAS's (`cublas_pinned`; bitwise
  on the H200 for the 8B shapes at M = 1 .. 8192), so prefill and training run cuBLAS with the decode's bits.
  Decode then cannot split K: weights of fewer than CHAIN_MAX_TILES 128-row tiles decode on the Gluon chain
  launch (`gluon_chain`), which streams them as fast as the split launch did (within -18..+18% per shape
  and M), and so do wider ones up to WIDE_CHAIN_MAX_M tokens; above it they walk whole tiles
  (`chain_decodes`). An explicit `seg_kb` still splits K (other bits).
  The promotion matters: fma(block product, sa * sb, sum); unfused, or sa and sb applied one at a time, differ.
- The tile shape only decides which program computes an element, not how: every tile of >= 64 rows runs on
  wgmma (16-row token tiles take the mma.sync path and gave other bits on the H200), with TMA or plain loads
  (checked on the GPU by tests/numerics/gpu/test_gemm_gpu.py and scripts/gemm_tiles.py).

Scales: `sa` is [M, ceil(K/128)] (1x128 groups, any strides); `sb` is [ceil(N/SCALE_BN), ceil(K/128)] with
SCALE_BN = 128 for 128x128 weight blocks or 1 for 1x128 groups (the wgrad pair).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from precision_engine.numerics.capabilities import SCALE_BLOCK, SMALL_M_MAX  # M <= SMALL_M_MAX: decode tiles
from precision_engine.numerics.contract import TRITON_INTERPRET
from precision_engine.numerics.cuda_context import make_context_current
from precision_engine.numerics.pdl import launch_options, wait_for_producer

BLOCK_K = SCALE_BLOCK  # one scale block per K step: the scale granularity of every operand we multiply


@dataclass(frozen=True)
class GemmConfig:
    """Tiles of the kernel's own operands: block_m rows of its `a`, block_n rows of its `b`.

    swap_ab runs c^T = b @ a^T (the weight is the kernel's `a`): at decode sizes the weight fills the
    64/128-row side that wgmma needs and the few tokens the narrow side, instead of a 64-row token tile that
    is mostly padding. None of these fields changes a bit of the result (GPU-tested); only segment_kb does.
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    tma: bool = True  # tensor-descriptor (TMA) loads where the operands allow them
    flatten: bool = False  # ask Triton to flatten the segment loop nest into one pipelined loop
    swap_ab: bool = False
    fused_sum: bool = False  # split-K: the tile's last program adds the segments (no second launch)
    persistent: int = 0  # > 0: at most this many programs per SM, each walking its share of the work units


# Prefill/training tiles, from the H200 sweeps (scripts/gemm_tiles.py, 2026-11-30): 64x128, 4 warps, 4 stages,
# TMA loads: 0.88-0.96x BF16 with the split's segments (128x128 with 8 warps 0.72-0.79x in the same run; it
# pays 5-10% per extra segment, 64x128 nothing). 128x256 and 256x128 spill (0.15x); flattening the segment
# loop nest (tl.range flatten) gained at most 0.05x.
PREFILL = GemmConfig(block_m=64, block_n=128, num_warps=4, num_stages=4)
_SWAP_M_MAX = 16  # decode with at most this many tokens swaps the operands and fuses the segment sum
WHOLE_TILES_MIN = 128  # 128-row weight tiles from which decode walks whole tiles (about one per SM of an H200)
# Weights of fewer 128-row tiles decode (M <= 64) on the Gluon chain launch where it runs: with K one chain, the
# launches below give a narrow weight only N / 64 programs, each waiting on every block's promotion (0.9-1.2x
# BF16; the chain launch 1.1-1.6x). From 112 tiles (14336 rows: the 8B's gate or up) the Triton launch's 64-row
# programs fill the SMs, and Gluon's whole tiles above 16 rows; they keep such weights above WIDE_CHAIN_MAX_M
# tokens. Up to WIDE_CHAIN_MAX_TILES tiles (the 8B's fused gate/up) and WIDE_CHAIN_MAX_M tokens the chain launch
# (two 64-row programs an SM: one wave for 14336 rows, two for 28672) beat them (H200, twenty-ninth session,
# s29_calls/wide_chain.py: 14336x4096 at M = 8 / 16 / 24 / 32, 1.42 / 1.52 / 1.53 / 1.56x -> 1.59 / 1.60 / 1.59 /
# 1.59x; 28672x4096 1.62 / 1.55 / 1.58 / 1.59x -> 1.69 / 1.69 / 1.67 / 1.67x; level at M = 1). Above 32 tokens it
# was mixed on the H200 (2-3% faster at 40, up to 2% slower at 48-56) and 2-3% slower on an H100.
CHAIN_MAX_TILES = 112
WIDE_CHAIN_MAX_TILES = 224
WIDE_CHAIN_MAX_M = 32
# The chain launch stages every K block's scales in shared memory: up to 256 blocks (K = 32768) its ring keeps
# the slots it needs at every token width (`gluon_chain.ring_slots`); a longer K takes the launches below.
CHAIN_MAX_KB = 256


def segment_kb(n: int, k: int) -> int:
    """K blocks per segment for an [*, K] x [N, K] GEMM: a function of (N, K) only, so a row's bits never
    depend on M. Every K block is one segment (see the module docstring)."""
    return triton.cdiv(k, BLOCK_K)


def walks_whole_tiles(n: int) -> bool:
    """Whether decode against an N-row weight walks whole-K 128-row tiles (>= WHOLE_TILES_MIN of them, enough
    to fill the SMs without a split), in this file's launch and in Gluon's alike."""
    return triton.cdiv(n, 128) >= WHOLE_TILES_MIN


def config_for(m: int, n: int, k: int) -> GemmConfig:
    """The tile config for an [M, N] output (H200 sweeps, 2026-11-30; none of it changes a bit):

    - M <= 16: swapped operands, the weight on wgmma's 64/128-row side and the tokens in a 16-wide tile (a
      16-row token tile would leave wgmma for mma.sync, which gave other bits), segments summed in the kernel:
      1.3-1.7x BF16 at M = 1 where 64-row token tiles gave 1.1-1.5x.
    - M <= 64: 64-row token tiles, the segments summed by a second kernel (the fused sum and swapped operands
      were 0-25% slower at M = 64).
    - Weight tiles: 128 rows with 3-4 stages when that still gives >= ~200 programs, else 64 rows, deeper.
    - Weights of >= 128 such tiles (fused gate/up, 28672 rows): no split; persistent programs, two per SM, each
      walking whole-K tiles (scripts/decode_sweep.py, 2026-12-01: 1.57x BF16 at M = 64 where the split launch
      gave 1.23x; 1.61x / 1.74x at M = 16 / 1 against 1.39x / 1.49x). On the narrower weights (4096..6144
      rows) the persistent launch was no faster than these.
    """
    if m > SMALL_M_MAX:
        return PREFILL
    if walks_whole_tiles(n):  # two persistent programs per SM
        if m <= _SWAP_M_MAX:
            return GemmConfig(block_m=128, block_n=16, num_warps=4, num_stages=4, group_m=1, swap_ab=True,
                              flatten=True, persistent=2)
        return GemmConfig(block_m=64, block_n=128, num_warps=4, num_stages=3, group_m=1, flatten=True, persistent=2)
    segments = triton.cdiv(triton.cdiv(k, BLOCK_K), segment_kb(n, k))
    wide = triton.cdiv(n, 128) * segments >= 200
    if m <= _SWAP_M_MAX:
        return GemmConfig(block_m=128 if wide else 64, block_n=16, num_warps=4, num_stages=4 if wide else 6,
                          group_m=1, swap_ab=True, fused_sum=True)
    if wide:
        return GemmConfig(block_m=64, block_n=128, num_warps=4, num_stages=3, group_m=1)
    return GemmConfig(block_m=64, block_n=64, num_warps=4, num_stages=4, group_m=1, tma=False)


@triton.jit
def _add_block(acc, a_src, b_src, sa_ptrs, sb_ptrs, kb, off_m, off_n, K, offs_k, mask_m, mask_n,
               stride_ak, stride_bk, stride_sak, stride_sbk,
               TMA: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc + (K block kb's FP8 dot product, from a fresh FP32 accumulator) * sa[m] * sb[n]."""
    if TMA:  # out-of-range rows, columns and K are zero-filled by the copy engine
        a = a_src.load([off_m, kb * BLOCK_K])
        b = b_src.load([off_n, kb * BLOCK_K]).T
    else:
        a_ptrs = a_src + kb * BLOCK_K * stride_ak
        b_ptrs = b_src + kb * BLOCK_K * stride_bk
        if EVEN_K:
            a = tl.load(a_ptrs, mask=mask_m[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=mask_n[None, :], other=0.0)
        else:
            k_left = K - kb * BLOCK_K
            a = tl.load(a_ptrs, mask=mask_m[:, None] & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=mask_n[None, :] & (offs_k[:, None] < k_left), other=0.0)
    sa = tl.load(sa_ptrs + kb * stride_sak, mask=mask_m, other=0.0)
    sb = tl.load(sb_ptrs + kb * stride_sbk, mask=mask_n, other=0.0)
    acc += tl.dot(a, b) * (sa[:, None] * sb[None, :])
    return acc


@triton.jit
def _tile(a_src, b_src, sa_ptr, sb_ptr, off_m, off_n, offs_k, M, N, stride_am, stride_ak, stride_bn, stride_bk,
          stride_sam, stride_sbn, SCALE_AM: tl.constexpr, SCALE_BN: tl.constexpr, TMA: tl.constexpr,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The output tile at (off_m, off_n): its row and column offsets and masks, the operand sources `_add_block`
    loads from (the tensor descriptors themselves with TMA, else pointer tiles at K block 0) and its scale rows."""
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    if TMA:
        a_ops = a_src
        b_ops = b_src
    else:
        a_ops = a_src + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ops = b_src + offs_n[None, :] * stride_bn + offs_k[:, None] * stride_bk
    sa_ptrs = sa_ptr + (offs_m // SCALE_AM) * stride_sam
    sb_ptrs = sb_ptr + (offs_n // SCALE_BN) * stride_sbn
    return offs_m, offs_n, mask_m, mask_n, a_ops, b_ops, sa_ptrs, sb_ptrs


@triton.jit
def _sum_if_last(ws_ptr, count_ptr, tile, offs, mask, seg_elems, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A split tile's total, its segment sums added in increasing order, computed by the last of its programs to
    arrive (`last`; the others get zeros). Each program stores its sum at ws[segment] (`seg_elems` apart, `offs`
    within) before the call. The last resets the tile's arrival counter for the next launch."""
    segments = tl.num_programs(1)
    tl.debug_barrier()  # every thread's partial is written before the release below
    arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
    last = arrived == segments - 1
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if last:
        for s in range(0, segments):
            total += tl.load(ws_ptr + s * seg_elems + offs, mask=mask, other=0.0, cache_modifier=".cg")
        tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")
    return last, total


@triton.jit
def _fp8_block_gemm_kernel(
    a_src, b_src, c_ptr, ws_ptr, count_ptr, sa_ptr, sb_ptr,
    M, N, K, SEG_KB,
    stride_am, stride_ak, stride_bn, stride_bk, stride_cm, stride_cn,
    stride_sam, stride_sak, stride_sbn, stride_sbk,
    SCALE_AM: tl.constexpr, SCALE_BN: tl.constexpr, EVEN_K: tl.constexpr, SPLIT: tl.constexpr,
    FUSED_SUM: tl.constexpr, TMA: tl.constexpr, FLATTEN: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    wait_for_producer()  # launched with PDL at decode sizes (`pdl`): nothing is read before this
    # Grouped program order so that neighbouring programs share operand tiles in L2; numerics-neutral.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pids_per_group = GROUP_M * num_pid_n
    first_pid_m = (pid // pids_per_group) * GROUP_M
    group_rows = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % pids_per_group) % group_rows
    pid_n = (pid % pids_per_group) // group_rows

    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    offs_k = tl.arange(0, BLOCK_K)
    offs_m, offs_n, mask_m, mask_n, a_ops, b_ops, sa_ptrs, sb_ptrs = _tile(
        a_src, b_src, sa_ptr, sb_ptr, off_m, off_n, offs_k, M, N, stride_am, stride_ak, stride_bn, stride_bk,
        stride_sam, stride_sbn, SCALE_AM, SCALE_BN, TMA, BLOCK_M, BLOCK_N)
    mask_c = mask_m[:, None] & mask_n[None, :]
    # int64: an [M, N] output passes 2^31 elements at e.g. 16k tokens x a 150k vocabulary.
    c_offs = offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    num_kb = tl.cdiv(K, BLOCK_K)

    if SPLIT:
        # One segment per program: its FP32 sum goes to ws[segment] (laid out like c); the segment sums are
        # added in increasing order by _sum_segments_kernel or, FUSED_SUM, by the tile's last program to finish.
        seg = tl.program_id(1)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kb in range(seg * SEG_KB, min(seg * SEG_KB + SEG_KB, num_kb)):
            acc = _add_block(acc, a_ops, b_ops, sa_ptrs, sb_ptrs, kb, off_m, off_n, K, offs_k, mask_m, mask_n,
                             stride_ak, stride_bk, stride_sak, stride_sbk, TMA, EVEN_K, BLOCK_K)
        tl.store(ws_ptr + seg * M * N + c_offs, acc, mask=mask_c)
        if FUSED_SUM:
            last, total = _sum_if_last(ws_ptr, count_ptr, pid, c_offs, mask_c, M * N, BLOCK_M, BLOCK_N)
            if last:
                tl.store(c_ptr + c_offs, total.to(c_ptr.dtype.element_ty), mask=mask_c)
    else:
        # total = ((0 + seg_0) + seg_1) + ...: the same additions as the split launch plus its sum.
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kb_lo in tl.range(0, num_kb, SEG_KB, flatten=FLATTEN):
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for kb in range(kb_lo, min(kb_lo + SEG_KB, num_kb)):
                acc = _add_block(acc, a_ops, b_ops, sa_ptrs, sb_ptrs, kb, off_m, off_n, K, offs_k, mask_m,
                                 mask_n, stride_ak, stride_bk, stride_sak, stride_sbk, TMA, EVEN_K, BLOCK_K)
            total += acc
        tl.store(c_ptr + c_offs, total.to(c_ptr.dtype.element_ty), mask=mask_c)


@triton.jit
def _fp8_persistent_kernel(
    a_src, b_src, c_ptr, ws_ptr, sa_ptr, sb_ptr,
    M, N, K, SEG_KB, UNITS,
    stride_am, stride_ak, stride_bn, stride_bk, stride_cm, stride_cn,
    stride_sam, stride_sak, stride_sbn, stride_sbk,
    SCALE_AM: tl.constexpr, SCALE_BN: tl.constexpr, EVEN_K: tl.constexpr, SPLIT: tl.constexpr,
    TMA: tl.constexpr, FLATTEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """`_fp8_block_gemm_kernel`'s additions, from a fixed grid: program p walks work units p, p + P, ... (a unit
    is a tile, or with SPLIT one segment of a tile), so every program does the same share and, flattened, its
    loads run ahead across unit boundaries instead of each program filling and draining its own pipeline.
    Segment ends are found in the K loop (total += acc there), which is the unsplit walk's sum."""
    wait_for_producer()
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_kb = tl.cdiv(K, BLOCK_K)
    segments = tl.cdiv(num_kb, SEG_KB)
    offs_k = tl.arange(0, BLOCK_K)
    for unit in tl.range(tl.program_id(0), UNITS, tl.num_programs(0), flatten=FLATTEN):
        if SPLIT:
            tile = unit // segments
            seg = unit % segments
            kb_lo = seg * SEG_KB
            kb_hi = tl.minimum(kb_lo + SEG_KB, num_kb)
        else:
            tile = unit
            seg = 0
            kb_lo = 0
            kb_hi = num_kb
        off_m = (tile // num_pid_n) * BLOCK_M
        off_n = (tile % num_pid_n) * BLOCK_N
        offs_m, offs_n, mask_m, mask_n, a_ops, b_ops, sa_ptrs, sb_ptrs = _tile(
            a_src, b_src, sa_ptr, sb_ptr, off_m, off_n, offs_k, M, N, stride_am, stride_ak, stride_bn, stride_bk,
            stride_sam, stride_sbn, SCALE_AM, SCALE_BN, TMA, BLOCK_M, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kb in range(kb_lo, kb_hi):
            acc = _add_block(acc, a_ops, b_ops, sa_ptrs, sb_ptrs, kb, off_m, off_n, K, offs_k, mask_m, mask_n,
                             stride_ak, stride_bk, stride_sak, stride_sbk, TMA, EVEN_K, BLOCK_K)
            ends = ((kb + 1) % SEG_KB == 0) | (kb + 1 == num_kb)
            total = tl.where(ends, total + acc, total)
            acc = tl.where(ends, 0.0, acc)
        c_offs = offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
        mask_c = mask_m[:, None] & mask_n[None, :]
        if SPLIT:  # total = 0 + this segment's sum; _sum_segments_kernel adds the segments in order
            tl.store(ws_ptr + seg * M * N + c_offs, total, mask=mask_c)
        else:
            tl.store(c_ptr + c_offs, total.to(c_ptr.dtype.element_ty), mask=mask_c)


@triton.jit
def _sum_segments_kernel(ws_ptr, c_ptr, MN, SEGMENTS, BLOCK: tl.constexpr):
    """c = ((0 + ws[0]) + ws[1]) + ... rounded once to c's dtype; c is contiguous [M, N], ws [S, M, N]."""
    wait_for_producer()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for seg in range(0, SEGMENTS):
        total += tl.load(ws_ptr + seg * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, total.to(c_ptr.dtype.element_ty), mask=mask)


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


_INTERPRETER_SMS = 3  # the CPU interpreter's stand-in SM count: enough programs to walk several units each


def _balanced_programs(units: int, per_sm: int, device: torch.device) -> int:
    """The fewest programs (at most per_sm per SM) that give every program the same number of units, but for
    the last few: a persistent launch then has no tail wave."""
    slots = per_sm * (_sm_count(device.index or 0) if device.type == "cuda" else _INTERPRETER_SMS)
    return triton.cdiv(units, triton.cdiv(units, slots))


_TILE_COUNTERS: dict[tuple[torch.device, int], torch.Tensor] = {}


def _tile_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """Per-tile arrival counters for the fused segment sum, all zero between launches (each tile's last
    program resets its own). One set per stream: launches on one stream never overlap, on two they may."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    counters = _TILE_COUNTERS.get((device, stream))
    if counters is None or counters.numel() < tiles:
        counters = torch.zeros(max(tiles, 4096), dtype=torch.int32, device=device)
        _TILE_COUNTERS[(device, stream)] = counters
    return counters


def _gluon_runs(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the Gluon kernels (Hopper) take these operands; False where Gluon is missing."""
    if not a.is_cuda or TRITON_INTERPRET:
        return False
    try:
        from precision_engine.numerics.gluon_gemm import runs
    except ImportError:  # a Triton whose Gluon lacks these names: the Triton kernel, same bits
        return False
    return runs(a, b)


_GLUON_DECODE_FILL = 0.8  # the least share of the SMs' work slots a Gluon decode launch must fill


def _gluon_decode_fills(n: int, k: int, seg: int, sms: int) -> bool:
    """Whether `gluon_gemm.DECODE`'s units (a 128-row weight tile's K segment each, or a whole tile when the
    weight is wide) fill >= _GLUON_DECODE_FILL of the SMs over their waves. At M = 64 on the H200 it beat this
    file's launch where they did: o 9.5 -> 8.7 us, down 22.9 -> 21.8, fused gate/up 39.9 -> 38.1; not on the
    fused q/k/v (192 units, 73% of two waves: 12.1 -> 12.2) (benchmarks/2026-12-01/s6_sweeps/gluon_decode)."""
    tiles = triton.cdiv(n, 128)
    units = tiles if walks_whole_tiles(n) else tiles * triton.cdiv(triton.cdiv(k, BLOCK_K), seg)
    return units >= _GLUON_DECODE_FILL * triton.cdiv(units, sms) * sms


def chain_decodes(m: int, n: int, k: int) -> bool:
    """Whether M tokens against an N x K weight decode on the Gluon chain launch: at most CHAIN_MAX_KB K blocks,
    and fewer than CHAIN_MAX_TILES 128-row tiles, or up to WIDE_CHAIN_MAX_TILES at up to WIDE_CHAIN_MAX_M tokens."""
    tiles = triton.cdiv(n, 128)
    rows_fit = tiles < CHAIN_MAX_TILES or (tiles <= WIDE_CHAIN_MAX_TILES and m <= WIDE_CHAIN_MAX_M)
    return rows_fit and triton.cdiv(k, BLOCK_K) <= CHAIN_MAX_KB


def one_segment_decode_runs_gluon(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a one-segment launch (seg_kb = every K block) of at most decode size has a fast launch here, Gluon
    running: the chain launch for a narrow weight, whole 128-row tiles for a weight of >= ~0.8 x SMs x 128 rows
    (Gluon's above 16 rows, this file's persistent swapped launch at 16 and under)."""
    m, k = a.shape
    n = b.shape[0]
    return m <= SMALL_M_MAX and _gluon_runs(a, b) and (
        chain_decodes(m, n, k) or _gluon_decode_fills(n, k, triton.cdiv(k, BLOCK_K), _sm_count(a.device.index or 0)))


def _tma_ok(x: torch.Tensor) -> bool:
    """The copy engine needs a contiguous last dim and 16-byte aligned rows and base."""
    return x.stride(1) == 1 and x.stride(0) % 16 == 0 and x.data_ptr() % 16 == 0


def block_scaled_gemm(
    a: torch.Tensor,
    a_scale: torch.Tensor,
    b: torch.Tensor,
    b_scale: torch.Tensor,
    *,
    b_scale_rows: int,
    out_dtype: torch.dtype = torch.bfloat16,
    config: GemmConfig | None = None,
    seg_kb: int | None = None,
    split: bool | None = None,
) -> torch.Tensor:
    """c = dequant(a) @ dequant(b)^T for a [M, K] and b [N, K] FP8 (K-major; other strides work, slower).

    `b_scale_rows` is how many rows of b share one scale row: 128 (128x128 blocks) or 1 (1x128 groups).
    `config` defaults to `config_for(M, N, K)`, `seg_kb` to `segment_kb(N, K)` (changing it changes the bits);
    `split` (one program per segment, then an in-order sum of the segments) defaults to on when the tiles
    alone would leave SMs idle, and off for a persistent config. Neither config nor split changes a bit of the
    result.

    On Hopper with Triton 3.6, with neither config nor split given and block-scaled b, Gluon runs instead, with
    the same additions, so the same bits (GPU-tested): `gluon_gemm` above decode sizes (1.2-1.4x the speed of
    this kernel's tiles there) and from 17 to 64 rows where its decode units fill the SMs
    (`_gluon_decode_fills`); `gluon_chain` at decode sizes for a narrow weight with one segment.
    """
    m, k = a.shape
    n = b.shape[0]
    if not (m and n and k):  # nothing to launch (and no K block to segment); an empty K sums to zero
        return torch.zeros((m, n), dtype=out_dtype, device=a.device)
    seg = seg_kb or segment_kb(n, k)
    gluon = config is None and split is None and b_scale_rows % BLOCK_K == 0 and _gluon_runs(a, b)
    if gluon and m > SMALL_M_MAX:
        from precision_engine.numerics.gluon_gemm import gluon_block_scaled_gemm

        return gluon_block_scaled_gemm(a, a_scale, b, b_scale, b_scale_rows=b_scale_rows, seg_kb=seg,
                                       out_dtype=out_dtype)
    if gluon and seg >= triton.cdiv(k, BLOCK_K) and chain_decodes(m, n, k):
        from precision_engine.numerics.gluon_chain import gluon_chain_decode_gemm

        return gluon_chain_decode_gemm(a, a_scale, b, b_scale, b_scale_rows=b_scale_rows, out_dtype=out_dtype)
    if gluon and m > _SWAP_M_MAX and _gluon_decode_fills(n, k, seg, _sm_count(a.device.index or 0)):
        return _gluon_decode(a, a_scale, b, b_scale, b_scale_rows, seg, out_dtype)
    cfg = config or config_for(m, n, k)
    segments = triton.cdiv(triton.cdiv(k, BLOCK_K), seg)
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    # The kernel computes c_k = a_k @ b_k^T; swap_ab makes it c^T = b @ a^T (same products, same sums).
    a_k, sa_k, rows_a, b_k, sb_k, rows_b, c_k = a, a_scale, 1, b, b_scale, b_scale_rows, c
    if cfg.swap_ab:
        a_k, sa_k, rows_a, b_k, sb_k, rows_b, c_k = b, b_scale, b_scale_rows, a, a_scale, 1, c.t()
    mk, nk = a_k.shape[0], b_k.shape[0]
    tiles = triton.cdiv(mk, cfg.block_m) * triton.cdiv(nk, cfg.block_n)
    if split is None:  # persistent programs balance whole tiles themselves
        split = not cfg.persistent and segments > 1 and (
            m <= SMALL_M_MAX or (a.is_cuda and tiles < _sm_count(a.device.index or 0)))
    split = split and segments > 1
    fused = split and cfg.fused_sum and not cfg.persistent  # persistent: a tile's segments may share a program
    tma = cfg.tma and _tma_ok(a) and _tma_ok(b)
    if tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        make_context_current(a.device)  # the launch encodes the descriptors here (`cuda_context`)
        a_src = TensorDescriptor.from_tensor(a_k, [cfg.block_m, BLOCK_K])
        b_src = TensorDescriptor.from_tensor(b_k, [cfg.block_n, BLOCK_K])
    else:
        a_src, b_src = a_k, b_k
    ws = torch.empty((segments, m, n), dtype=torch.float32, device=a.device) if split else c
    strides = (a_k.stride(0), a_k.stride(1), b_k.stride(0), b_k.stride(1), c_k.stride(0), c_k.stride(1),
               sa_k.stride(0), sa_k.stride(1), sb_k.stride(0), sb_k.stride(1))
    if cfg.persistent:
        units = tiles * (segments if split else 1)
        _fp8_persistent_kernel[(_balanced_programs(units, cfg.persistent, a.device),)](
            a_src, b_src, c_k, ws, sa_k, sb_k, mk, nk, k, seg, units, *strides,
            SCALE_AM=rows_a, SCALE_BN=rows_b, EVEN_K=(k % BLOCK_K == 0), SPLIT=split, TMA=tma,
            FLATTEN=cfg.flatten, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=BLOCK_K,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, **launch_options(m, a.device),
        )
    else:
        counters = _tile_counters(a.device, tiles) if fused else c
        _fp8_block_gemm_kernel[(tiles, segments if split else 1)](
            a_src, b_src, c_k, ws, counters, sa_k, sb_k, mk, nk, k, seg, *strides,
            SCALE_AM=rows_a, SCALE_BN=rows_b, EVEN_K=(k % BLOCK_K == 0), SPLIT=split, FUSED_SUM=fused, TMA=tma,
            FLATTEN=cfg.flatten, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=BLOCK_K, GROUP_M=cfg.group_m,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, **launch_options(m, a.device),
        )
    return _from_segments(ws, c) if split and not fused else c


def _from_segments(ws: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Segment sums ws [S, M, N] added in order into c by `_sum_segments_kernel`: `block_scaled_gemm`'s output."""
    if c.numel():
        block = 1024
        _sum_segments_kernel[(triton.cdiv(c.numel(), block),)](ws, c, c.numel(), ws.shape[0], BLOCK=block,
                                                               num_warps=4, **launch_options(c.shape[0], c.device))
    return c


def _gluon_decode(a, a_scale, b, b_scale, b_scale_rows, seg, out_dtype) -> torch.Tensor:
    """`gluon_gemm.gluon_decode_gemm`'s output as `block_scaled_gemm` returns it: c, its segment sums added in
    order by `_sum_segments_kernel` where it has segments."""
    from precision_engine.numerics.gluon_gemm import DECODE, gluon_decode_gemm

    out = gluon_decode_gemm(a, a_scale, b, b_scale, b_scale_rows=b_scale_rows, seg_kb=seg, out_dtype=out_dtype,
                            config=replace(DECODE, whole=walks_whole_tiles(b.shape[0])))
    if out.dim() == 2:
        return out
    return _from_segments(out, torch.empty(out.shape[1:], dtype=out_dtype, device=a.device))


@triton.jit
def _transpose_kernel(x_ptr, y_ptr, R, C, stride_xr, stride_yr, BLOCK: tl.constexpr):
    offs_r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    tile = tl.load(x_ptr + offs_r[:, None] * stride_xr + offs_c[None, :], mask=mask)
    tl.store(y_ptr + offs_c[:, None] * stride_yr + offs_r[None, :], tl.trans(tile), mask=tl.trans(mask))


def transpose_bytes(x: torch.Tensor) -> torch.Tensor:
    """x^T contiguous for a row-major 1-byte matrix (FP8), through 64x64 tiles."""
    x = x if x.stride(1) == 1 else x.contiguous()
    r, c = x.shape
    y = torch.empty((c, r), dtype=x.dtype, device=x.device)
    if r and c:
        block = 64
        _transpose_kernel[(triton.cdiv(r, block), triton.cdiv(c, block))](
            x.view(torch.uint8), y.view(torch.uint8), r, c, x.stride(0), y.stride(0), BLOCK=block, num_warps=4
        )
    return y
