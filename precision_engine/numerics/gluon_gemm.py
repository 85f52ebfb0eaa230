"""The block-scaled FP8 GEMM of `triton_gemm`, for Hopper, in Gluon: above decode sizes, and from 17 to 64 rows
where the decode launch's units fill the SMs (`triton_gemm._gluon_decode_fills`).

Why a second kernel: the arithmetic that makes a row's bits independent of M (a fresh FP32 accumulator per
128-wide K block, scaled by sa * sb before it joins a running segment sum) makes every K block's wgmma wait
for the one before it to be scaled, and Triton's `tl.dot` cannot overlap the two on Hopper: 0.73-0.99x BF16
on the 8B shapes. Gluon states the schedule (H200 sweeps, scripts/gluon_sweep.py, 2026-12-01):

- warp specialisation: one TMA warp fills a ring of `stages` shared-memory slots; two MMA warpgroups, each
  owning 64 rows of a 128x128 tile, wait on the slot's `ready` barrier and give it back through `empty`, never
  waiting for each other (one 8-warp consumer synchronised both at every K block: 0.66-1.13x);
- each warpgroup waits for its block's wgmma and promotes it while the other warpgroup's wgmma runs, with the
  segment sum and running total in registers (issuing block kb before promoting kb-1 inside one warpgroup
  needs a second accumulator, which pushes the total into shared memory: 0.84-1.37x against 1.16-1.50x in the
  seventh session's sweeps, benchmarks/2026-12-01/s7_sweeps; the kernel runs 1.23-1.48x BF16 on the 8B shapes);
- a weight block's scale is loaded by every thread of the row layout, not as one scalar: ptxas moves a scalar
  load into a uniform register at once, stalling the wgmma issue for an L2 round trip (ncu, 10% of samples);
- persistent: one program per SM walks tiles, so the TMA warp runs into the next tile during an epilogue, which
  stores through shared memory and one TMA copy per warpgroup (+10% over per-thread stores);
- from the fused qkv's weight size up (`training_config`), each warpgroup issues a block's product as two
  wgmmas over the tile's column halves and promotes one while the other runs (`_split_mma_partition`), in
  the same registers: 1.3-9.7% faster there per row on the mean of four H200 sweeps (2026-12-02), but for
  gate/up at 16384 tokens (-1.3%, one slow run), and 1-5% slower on 4096x4096 and 1024x4096.

The additions are exactly `triton_gemm`'s: per segment of `segment_kb(N, K)` blocks, seg = 0, then
seg += D_kb * (sa[m, kb] * sb[n, kb]) in increasing kb; total = 0, then total += seg per segment in order;
one rounding to the output dtype. So a row computed here has the bits the Triton kernel gives it at decode
sizes (bitwise across M in tests/numerics/gpu/test_gemm_gpu.py).

The decode launch (`gluon_decode_gemm`, M <= 64) makes the same additions with one TMA warp and one MMA
warpgroup for the 64 token rows, which is alone on the tensor cores, so it issues block kb's wgmma before it
promotes kb-1 (`_tile_product`); its units are one K segment of a 128-row weight tile whose FP32 sums
`triton_gemm` adds in order, or a whole tile where the weight has enough tiles to fill the SMs alone (fused
gate/up).
At M = 64 on the H200 it took o_proj from 9.5 to 8.7 us, down_proj 22.9 -> 21.8, fused gate/up 39.9 -> 38.1.
Since AUTO's K is one segment (`triton_gemm.segment_kb`), AUTO runs it on wide weights' whole tiles only; narrow
weights decode in `gluon_chain`, and segments come only from a caller that names them.

GPU only (Hopper, sm_90): Triton's interpreter does not run Gluon; on the CPU the reference kernel and the
Triton kernel in the interpreter stand in for both launches.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from precision_engine.numerics.capabilities import SCALE_BLOCK
from precision_engine.numerics.cuda_context import make_context_current
from precision_engine.numerics.pdl import launch_options

BLOCK_K = SCALE_BLOCK
WARPGROUP_ROWS = gl.constexpr(64)  # wgmma's M: each MMA warpgroup owns 64 rows of a tile
TILE_M = 2 * 64  # two MMA warpgroups per tile


@dataclass(frozen=True)
class GluonConfig:
    """Load ring and schedule of a 128-row tile (two MMA warpgroups of 64 rows). Numerics-neutral: the GPU test
    runs TRAINING and other schedules bitwise against the Triton kernel."""

    block_n: int = 128
    stages: int = 6  # at most: fewer where the epilogue's buffer leaves no room (`_ring_slots`)
    group_m: int = 8  # programs sharing a column of `a` tiles run together (L2 reuse)
    persistent: bool = True  # one program per SM walking tiles (else one per tile)
    # each warpgroup's block product as two wgmmas of half the tile's columns, one promoted while the other
    # runs (`_split_mma_partition`); taken where one weight scale covers the tile and the output is TMA-stored
    split_n: bool = False


TRAINING = GluonConfig()
TRAINING_SPLIT = GluonConfig(split_n=True)
SPLIT_MIN_WEIGHT = 6144 * 4096  # the split pays from the fused qkv's weight up (H200, benchmarks 2026-12-02)


def training_config(n: int, k: int) -> GluonConfig:
    """The schedule for an [*, K] x [N, K] training GEMM (numerics-neutral): the column split from the fused
    qkv's weight up. Four H200 sweeps of the same rows (benchmarks/2026-12-02/s10_calls, mean per row): the
    split +1.3/+2.1% on 6144x4096 (8192/16384 tokens), +4.0/-1.3% on 28672x4096, +5.9/+3.2% on 4096x14336,
    +9.7/+1.6% on 14336x4096; -1.2/-2.2% on 4096x4096 and +2.7/-4.7% on 1024x4096, which stay unsplit."""
    return TRAINING_SPLIT if n * k >= SPLIT_MIN_WEIGHT else TRAINING


@gluon.jit
def _issue_mma(a_bufs, b_bufs, ready, it, acc, STAGES: gl.constexpr):
    """The decode launch's FP8 product of the K block at ring position `it` into a fresh accumulator
    (use_acc=False), asynchronously."""
    slot = it % STAGES
    mbarrier.wait(ready.index(slot), (it // STAGES) & 1)
    return warpgroup_mma(a_bufs.index(slot), b_bufs.index(slot).permute((1, 0)), acc, use_acc=False, is_async=True)


@gluon.jit
def _load_scales(sa_ptrs, sb_ptrs, kb, num_kb, stride_sak, stride_sbk, mask_m, mask_n, UNIFORM_SB: gl.constexpr,
                 SB_ROWS: gl.constexpr = False):
    """Block kb's scales (zeros past the last block), loaded two blocks before they are used: a load issued
    after a wgmma wait would stall the promotion for a whole L2 round trip. SB_ROWS: `sb_ptrs` holds the
    tile's one weight scale in every row (`_row_scale_ptrs`) instead of as a scalar."""
    live = kb < num_kb
    sa = gl.load(sa_ptrs + kb * stride_sak, mask=mask_m & live, other=0.0)
    if SB_ROWS:
        sb = gl.load(sb_ptrs + kb * stride_sbk, mask=mask_m & live, other=0.0)
    elif UNIFORM_SB:
        sb = gl.load(sb_ptrs + kb * stride_sbk, mask=live, other=0.0)
    else:
        sb = gl.load(sb_ptrs + kb * stride_sbk, mask=mask_n & live, other=0.0)
    return sa, sb


@gluon.jit
def _row_scale_ptrs(sb_ptr, offs_m, off_n, stride_sbn, SCALE_BN: gl.constexpr):
    """The address of a tile's one weight-block scale row, in each of its rows. Loaded as a scalar (or with a
    scalar mask), ptxas moves the value into a uniform register as soon as it is loaded, which stalls the
    warpgroup there for an L2 round trip (ncu: 10% of the training kernel's samples, the wgmma issue held).
    The decode launch keeps the scalar: the row form's registers spill its whole-tile walk (24 bytes at 255
    registers), and its speed with it was not measured."""
    return sb_ptr + (off_n // SCALE_BN) * stride_sbn + offs_m * 0


@gluon.jit
def _scaled(d, sa, sb, UNIFORM_SB: gl.constexpr):
    """D_kb * (sa * sb): the product triton_gemm's _add_block forms. When one scale row covers the whole tile
    (128x128 weight blocks) sb is one number, so the product is formed per row, with the same value."""
    if UNIFORM_SB:
        out = d * (sa * sb)[:, None]
    else:
        out = d * (sa[:, None] * sb[None, :])
    return out


@gluon.jit
def _tile(t, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    """Output tile t's (row, column) offsets, in groups of GROUP_M row tiles that share `b` tiles in L2."""
    num_pid_m = gl.cdiv(M, BLOCK_M)
    pids_per_group = GROUP_M * gl.cdiv(N, BLOCK_N)
    first_pid_m = (t // pids_per_group) * GROUP_M
    group_rows = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (t % pids_per_group) % group_rows
    pid_n = (t % pids_per_group) // group_rows
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def _fill(a_desc, b_desc, a_bufs, b_bufs, ready, empty, it, off_a, off_b, kb, STAGES: gl.constexpr):
    """Ring position `it`: wait until its slot is released (the first round passes at once), then TMA K block
    kb of `a` (rows from off_a) and of `b` (rows from off_b) into it, both arriving on its `ready` barrier."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    slot = it % STAGES
    mbarrier.wait(empty.index(slot), ((it // STAGES) & 1) ^ 1)
    bar = ready.index(slot)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(a_desc, [off_a, kb * BLOCK_K], bar, a_bufs.index(slot))
    tma.async_copy_global_to_shared(b_desc, [off_b, kb * BLOCK_K], bar, b_bufs.index(slot))


@gluon.jit
def _load_partition(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, num_kb,
                    GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """The TMA warp: walks this program's tiles and fills each ring slot as soon as both MMA warpgroups have
    released it, running ahead into the next tile while they finish the last one."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    it = 0
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        off_m, off_n = _tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for kb in range(num_kb):
            _fill(a_desc, b_desc, a_bufs, b_bufs, ready, empty, it, off_m, off_n, kb, STAGES)
            it += 1


@gluon.jit
def _release(done, sa, sb, seg, total, empty, it, kb, num_kb, SEG_KB, STAGES: gl.constexpr, mma: gl.constexpr,
             UNIFORM_SB: gl.constexpr, CLOSES: gl.constexpr):
    """Block kb's product is done: hand its ring slot back to the TMA warp, add it to the segment sum, and
    (CLOSES) close the segment into the running total when kb is its last block (all but the last segment: the
    caller adds that one)."""
    mbarrier.arrive(empty.index(it % STAGES))
    seg = seg + _scaled(done, sa, sb, UNIFORM_SB)
    if CLOSES:
        if ((kb + 1) % SEG_KB == 0) & (kb + 1 < num_kb):
            total.store(total.load(mma) + seg)
            seg = gl.zeros_like(seg)
    return seg


@gluon.jit
def _mma_partition(a_bufs, b_bufs, ready, empty, c_desc, c_bufs, c_ptr, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                   stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                   ROW0: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, SCALE_BN: gl.constexpr,
                   GROUP_M: gl.constexpr, STAGES: gl.constexpr, TMA_STORE: gl.constexpr):
    """One MMA warpgroup: rows ROW0 .. ROW0 + ROWS of each of this program's tiles. Per K block: its wgmma,
    waited for, the slot released, the product promoted with its scales (loaded two blocks ahead) into the
    segment sum; per segment, the sum into the running total; then the tile stored (TMA_STORE: through shared
    memory, one TMA copy)."""
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32])
    UNIFORM_SB: gl.constexpr = SCALE_BN % BLOCK_N == 0  # one scale row for all the tile's columns
    slot = 0
    phase = 0
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        off_m, off_n = _tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        offs_m = off_m + ROW0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, mma))
        offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
        mask_m = offs_m < M
        mask_n = offs_n < N
        sa_ptrs = sa_ptr + offs_m * stride_sam
        if UNIFORM_SB:
            sb_ptrs = _row_scale_ptrs(sb_ptr, offs_m, off_n, stride_sbn, SCALE_BN)
        else:
            sb_ptrs = sb_ptr + (offs_n // SCALE_BN) * stride_sbn
        zero = gl.zeros([ROWS, BLOCK_N], gl.float32, mma)
        total = zero
        sa_c, sb_c = _load_scales(sa_ptrs, sb_ptrs, 0, num_kb, stride_sak, stride_sbk, mask_m, mask_n, UNIFORM_SB,
                                  UNIFORM_SB)
        sa_n, sb_n = _load_scales(sa_ptrs, sb_ptrs, 1, num_kb, stride_sak, stride_sbk, mask_m, mask_n, UNIFORM_SB,
                                  UNIFORM_SB)
        for s0 in range(0, num_kb, SEG_KB):
            seg = zero
            for kb in range(s0, min(s0 + SEG_KB, num_kb)):
                sa_f, sb_f = _load_scales(sa_ptrs, sb_ptrs, kb + 2, num_kb, stride_sak, stride_sbk, mask_m, mask_n,
                                          UNIFORM_SB, UNIFORM_SB)
                mbarrier.wait(ready.index(slot), phase)
                a = a_bufs.index(slot).slice(ROW0, ROWS)
                d = warpgroup_mma(a, b_bufs.index(slot).permute((1, 0)), zero, use_acc=False, is_async=True)
                d = warpgroup_mma_wait(num_outstanding=0, deps=(d,))
                mbarrier.arrive(empty.index(slot))
                seg = seg + _scaled(d, sa_c, sb_c, UNIFORM_SB)
                sa_c, sb_c, sa_n, sb_n = sa_n, sb_n, sa_f, sb_f
                slot += 1
                if slot == STAGES:
                    slot = 0
                    phase ^= 1
            total = total + seg
        if TMA_STORE:
            c_buf = c_bufs.index(ROW0 // ROWS)
            tma.store_wait(0)  # the last tile's copy has left the buffer
            c_buf.store(total.to(c_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(c_desc, [off_m + ROW0, off_n], c_buf)
        else:
            c_offs = offs_m[:, None].to(gl.int64) * stride_cm + offs_n[None, :] * stride_cn
            gl.store(c_ptr + c_offs, total.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])
    if TMA_STORE:
        tma.store_wait(0)


@gluon.jit
def _half_product(a_bufs, b_bufs, slot, zero, ROW0: gl.constexpr, ROWS: gl.constexpr, COL0: gl.constexpr):
    """The wgmma of ring slot `slot` for this warpgroup's rows and the columns COL0 .. COL0 + the half's width
    into a fresh accumulator, asynchronously."""
    a = a_bufs.index(slot).slice(ROW0, ROWS)
    b = b_bufs.index(slot).slice(COL0, zero.shape[1])
    return warpgroup_mma(a, b.permute((1, 0)), zero, use_acc=False, is_async=True)


@gluon.jit
def _next_slot(slot, phase, STAGES: gl.constexpr):
    """The ring position after (slot, phase)."""
    slot += 1
    if slot == STAGES:
        slot = 0
        phase ^= 1
    return slot, phase


@gluon.jit
def _split_mma_partition(a_bufs, b_bufs, ready, empty, c_desc, c_bufs, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                         stride_sam, stride_sak, stride_sbn, stride_sbk,
                         ROW0: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, SCALE_BN: gl.constexpr,
                         GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """`_mma_partition` with each block product issued as two wgmmas over the tile's column halves (lo, hi),
    two blocks per loop trip: lo(kb), hi(kb), then lo(kb + 1) goes in while hi(kb) is promoted, hi(kb + 1)
    while lo(kb + 1) is, so the warpgroup keeps a wgmma on the tensor cores through its own promotions, in
    the registers one 64x128 accumulator took. Every trip drains (ptxas serialises wgmmas in flight across a
    loop's back edge). Segments of even length only (`_even_segments`). Each half makes its columns' additions of
    `_mma_partition` in the same order, so the bits are its bits (GPU-tested). One weight scale per tile."""
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    HALF: gl.constexpr = BLOCK_N // 2
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 32])
    slot = 0
    phase = 0
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        off_m, off_n = _tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        offs_m = off_m + ROW0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, mma))
        mask_m = offs_m < M
        sa_ptrs = sa_ptr + offs_m * stride_sam
        sb_ptrs = _row_scale_ptrs(sb_ptr, offs_m, off_n, stride_sbn, SCALE_BN)
        zero = gl.zeros([ROWS, HALF], gl.float32, mma)
        total_lo = zero
        total_hi = zero
        # scales of blocks kb (sa_0, sb_0) and kb + 1 (sa_1, sb_1), each loaded two blocks ahead of its use
        sa_0, sb_0 = _load_scales(sa_ptrs, sb_ptrs, 0, num_kb, stride_sak, stride_sbk, mask_m, mask_m, True, True)
        sa_1, sb_1 = _load_scales(sa_ptrs, sb_ptrs, 1, num_kb, stride_sak, stride_sbk, mask_m, mask_m, True, True)
        for s0 in range(0, num_kb, SEG_KB):
            seg_lo = zero
            seg_hi = zero
            for kb in range(s0, min(s0 + SEG_KB, num_kb), 2):  # segments of even length (the caller's rule)
                sa_2, sb_2 = _load_scales(sa_ptrs, sb_ptrs, kb + 2, num_kb, stride_sak, stride_sbk, mask_m, mask_m,
                                          True, True)
                scale = sa_0 * sb_0
                mbarrier.wait(ready.index(slot), phase)
                lo = _half_product(a_bufs, b_bufs, slot, zero, ROW0, ROWS, 0)
                hi = _half_product(a_bufs, b_bufs, slot, zero, ROW0, ROWS, HALF)
                lo = warpgroup_mma_wait(num_outstanding=1, deps=(lo,))
                seg_lo = seg_lo + lo * scale[:, None]
                sa_3, sb_3 = _load_scales(sa_ptrs, sb_ptrs, kb + 3, num_kb, stride_sak, stride_sbk, mask_m, mask_m,
                                          True, True)
                next_scale = sa_1 * sb_1
                slot1, phase1 = _next_slot(slot, phase, STAGES)
                mbarrier.wait(ready.index(slot1), phase1)
                lo = _half_product(a_bufs, b_bufs, slot1, zero, ROW0, ROWS, 0)
                hi = warpgroup_mma_wait(num_outstanding=1, deps=(hi,))
                mbarrier.arrive(empty.index(slot))
                seg_hi = seg_hi + hi * scale[:, None]
                hi = _half_product(a_bufs, b_bufs, slot1, zero, ROW0, ROWS, HALF)
                lo = warpgroup_mma_wait(num_outstanding=1, deps=(lo,))
                seg_lo = seg_lo + lo * next_scale[:, None]
                hi = warpgroup_mma_wait(num_outstanding=0, deps=(hi,))
                mbarrier.arrive(empty.index(slot1))
                seg_hi = seg_hi + hi * next_scale[:, None]
                sa_0, sb_0, sa_1, sb_1 = sa_2, sb_2, sa_3, sb_3
                slot, phase = _next_slot(slot1, phase1, STAGES)
            total_lo = total_lo + seg_lo
            total_hi = total_hi + seg_hi
        halves = c_bufs.index(2 * (ROW0 // ROWS)), c_bufs.index(2 * (ROW0 // ROWS) + 1)
        tma.store_wait(0)  # the last tile's copies have left the buffers
        halves[0].store(total_lo.to(c_desc.dtype))
        halves[1].store(total_hi.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [off_m + ROW0, off_n], halves[0])
        tma.async_copy_shared_to_global(c_desc, [off_m + ROW0, off_n + HALF], halves[1])
    tma.store_wait(0)


@gluon.jit
def _tile_product(a_bufs, b_bufs, ready, empty, total, zero, base, num_kb, SEG_KB, sa_ptrs, sb_ptrs,
                  stride_sak, stride_sbk, mask_m, mask_n, STAGES: gl.constexpr, UNROLL: gl.constexpr,
                  UNIFORM_SB: gl.constexpr, mma: gl.constexpr, CLOSES: gl.constexpr):
    """Every K block of one tile: closed segments go to `total`, the open one is returned (CLOSES False: the
    blocks are one segment, never closed, and `total` is not used).

    Two accumulators alternate: one in flight (block kb), one being scaled (kb - 1). ptxas keeps wgmmas
    asynchronous only while none is in flight across a loop's back edge, so each trip issues UNROLL blocks
    and drains: the last block of a trip is scaled with no wgmma under it."""
    seg = zero
    d_x = zero
    d_y = zero
    sa_c, sb_c = _load_scales(sa_ptrs, sb_ptrs, 0, num_kb, stride_sak, stride_sbk, mask_m, mask_n, UNIFORM_SB)
    sa_n, sb_n = _load_scales(sa_ptrs, sb_ptrs, 1, num_kb, stride_sak, stride_sbk, mask_m, mask_n, UNIFORM_SB)
    full = num_kb - num_kb % UNROLL
    for kb0 in range(0, full, UNROLL):
        d_x = _issue_mma(a_bufs, b_bufs, ready, base + kb0, d_x, STAGES)
        for j in gl.static_range(1, UNROLL):
            sa_f, sb_f = _load_scales(sa_ptrs, sb_ptrs, kb0 + j + 1, num_kb, stride_sak, stride_sbk, mask_m, mask_n,
                                      UNIFORM_SB)
            if j % 2 == 1:
                d_y = _issue_mma(a_bufs, b_bufs, ready, base + kb0 + j, d_y, STAGES)
                d_x = warpgroup_mma_wait(num_outstanding=1, deps=(d_x,))
                seg = _release(d_x, sa_c, sb_c, seg, total, empty, base + kb0 + j - 1, kb0 + j - 1, num_kb, SEG_KB,
                               STAGES, mma, UNIFORM_SB, CLOSES)
            else:
                d_x = _issue_mma(a_bufs, b_bufs, ready, base + kb0 + j, d_x, STAGES)
                d_y = warpgroup_mma_wait(num_outstanding=1, deps=(d_y,))
                seg = _release(d_y, sa_c, sb_c, seg, total, empty, base + kb0 + j - 1, kb0 + j - 1, num_kb, SEG_KB,
                               STAGES, mma, UNIFORM_SB, CLOSES)
            sa_c, sb_c, sa_n, sb_n = sa_n, sb_n, sa_f, sb_f
        sa_f, sb_f = _load_scales(sa_ptrs, sb_ptrs, kb0 + UNROLL + 1, num_kb, stride_sak, stride_sbk, mask_m, mask_n,
                                  UNIFORM_SB)
        last = kb0 + UNROLL - 1
        if UNROLL % 2 == 0:
            d_y = warpgroup_mma_wait(num_outstanding=0, deps=(d_y,))
            seg = _release(d_y, sa_c, sb_c, seg, total, empty, base + last, last, num_kb, SEG_KB, STAGES, mma,
                           UNIFORM_SB, CLOSES)
        else:
            d_x = warpgroup_mma_wait(num_outstanding=0, deps=(d_x,))
            seg = _release(d_x, sa_c, sb_c, seg, total, empty, base + last, last, num_kb, SEG_KB, STAGES, mma,
                           UNIFORM_SB, CLOSES)
        sa_c, sb_c, sa_n, sb_n = sa_n, sb_n, sa_f, sb_f
    for kb in range(full, num_kb):  # the blocks past the last whole trip, one at a time
        d_x = _issue_mma(a_bufs, b_bufs, ready, base + kb, d_x, STAGES)
        d_x = warpgroup_mma_wait(num_outstanding=0, deps=(d_x,))
        seg = _release(d_x, sa_c, sb_c, seg, total, empty, base + kb, kb, num_kb, SEG_KB, STAGES, mma, UNIFORM_SB,
                       CLOSES)
        sa_c, sb_c = sa_n, sb_n
        sa_n, sb_n = _load_scales(sa_ptrs, sb_ptrs, kb + 2, num_kb, stride_sak, stride_sbk, mask_m, mask_n,
                                  UNIFORM_SB)
    return seg


@gluon.jit
def _ring(a_desc, b_desc, A_ROWS: gl.constexpr, B_ROWS: gl.constexpr, STAGES: gl.constexpr,
          CONSUMERS: gl.constexpr):
    """The load ring the kernels share: STAGES slots of an A_ROWS-row `a` tile and a B_ROWS-row `b` tile, a
    `ready` barrier per slot (the TMA warp's one arrival) and an `empty` one (one arrival per MMA warpgroup)."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, A_ROWS, BLOCK_K], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, B_ROWS, BLOCK_K], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=CONSUMERS)
    return a_bufs, b_bufs, ready, empty


@gluon.jit
def _gluon_block_gemm_kernel(
    a_desc, b_desc, c_desc, c_ptr, sa_ptr, sb_ptr,
    M, N, K, SEG_KB,
    stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
    SCALE_BN: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, TMA_STORE: gl.constexpr,
    SPLIT_N: gl.constexpr = False,
):
    """Persistent: each program walks tiles pid, pid + programs, ... with one TMA warp and two MMA warpgroups.
    TMA_STORE: c's rows are TMA-legal and `c_desc` describes c (else c_desc is unused), in blocks of a whole
    tile's columns, or SPLIT_N (`_split_mma_partition`, which needs TMA_STORE) of half of them."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs, b_bufs, ready, empty = _ring(a_desc, b_desc, BLOCK_M, BLOCK_N, STAGES, BLOCK_M // WARPGROUP_ROWS)
    if TMA_STORE:
        C_COLS: gl.constexpr = c_desc.block_type.shape[1]
        c_bufs = gl.allocate_shared_memory(
            c_desc.dtype, [BLOCK_M // WARPGROUP_ROWS * (BLOCK_N // C_COLS), WARPGROUP_ROWS, C_COLS], c_desc.layout)
    else:
        c_bufs = ready  # never read (warp_specialize takes no None)
    num_kb = gl.cdiv(K, BLOCK_K)
    if SPLIT_N:
        gl.warp_specialize([
            (_split_mma_partition, (a_bufs, b_bufs, ready, empty, c_desc, c_bufs, sa_ptr, sb_ptr, M, N, num_kb,
                                    SEG_KB, stride_sam, stride_sak, stride_sbn, stride_sbk,
                                    0, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES)),
            (_split_mma_partition, (a_bufs, b_bufs, ready, empty, c_desc, c_bufs, sa_ptr, sb_ptr, M, N, num_kb,
                                    SEG_KB, stride_sam, stride_sak, stride_sbn, stride_sbk,
                                    WARPGROUP_ROWS, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES)),
            (_load_partition, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, num_kb, GROUP_M, STAGES)),
        ], [4, 1], [232, 40])
    else:
        gl.warp_specialize([
            (_mma_partition, (a_bufs, b_bufs, ready, empty, c_desc, c_bufs, c_ptr, sa_ptr, sb_ptr, M, N, num_kb,
                              SEG_KB, stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                              0, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES, TMA_STORE)),
            (_mma_partition, (a_bufs, b_bufs, ready, empty, c_desc, c_bufs, c_ptr, sa_ptr, sb_ptr, M, N, num_kb,
                              SEG_KB, stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                              WARPGROUP_ROWS, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES, TMA_STORE)),
            (_load_partition, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, num_kb, GROUP_M, STAGES)),
        ], [4, 1], [232, 40])


@gluon.jit
def _wait_for_producer():
    """`pdl.wait_for_producer` (griddepcontrol.wait) for Gluon, which calls no Triton functions."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _unit(u, num_kb, SEG_KB, BLOCK_N: gl.constexpr, WHOLE: gl.constexpr):
    """Decode work unit u: (its column offset, first K block, K blocks): one K segment of one column tile, or
    WHOLE, every block of column tile u."""
    if WHOLE:
        off_n, kb_lo, count = u * BLOCK_N, 0, num_kb
    else:
        segments = gl.cdiv(num_kb, SEG_KB)
        kb_lo = (u % segments) * SEG_KB
        off_n, count = (u // segments) * BLOCK_N, min(SEG_KB, num_kb - kb_lo)
    return off_n, kb_lo, count


@gluon.jit
def _decode_load_partition(a_desc, b_desc, a_bufs, b_bufs, ready, empty, units, num_kb, SEG_KB,
                           STAGES: gl.constexpr, WHOLE: gl.constexpr):
    """The decode launch's TMA warp: this program's units in turn, K blocks in order, into the ring; the one row
    tile of tokens is re-read per block (it stays in L2), rows past M zero-filled by the copy engine."""
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    _wait_for_producer()  # launched with PDL (`pdl`): the tokens and their scales are written
    it = 0
    for u in range(gl.program_id(0), units, gl.num_programs(0)):
        off_n, kb_lo, count = _unit(u, num_kb, SEG_KB, BLOCK_N, WHOLE)
        for kb in range(kb_lo, kb_lo + count):
            _fill(a_desc, b_desc, a_bufs, b_bufs, ready, empty, it, 0, off_n, kb, STAGES)
            it += 1


@gluon.jit
def _decode_mma_partition(a_bufs, b_bufs, ready, empty, total, out_ptr, sa_ptr, sb_ptr, M, N, units, num_kb,
                          SEG_KB, stride_seg, stride_om, stride_on, stride_sam, stride_sak, stride_sbn, stride_sbk,
                          BLOCK_N: gl.constexpr, SCALE_BN: gl.constexpr, STAGES: gl.constexpr,
                          UNROLL: gl.constexpr, WHOLE: gl.constexpr):
    """One MMA warpgroup, the 64 token rows: each unit's K blocks as `_tile_product` walks them, then its FP32
    segment sum stored to out[segment], or WHOLE, the tile's segments added in order from zero in `total`
    (shared memory) and rounded once to out's dtype, as the training kernel does."""
    _wait_for_producer()
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32])
    UNIFORM_SB: gl.constexpr = SCALE_BN % BLOCK_N == 0
    offs_m = gl.arange(0, WARPGROUP_ROWS, layout=gl.SliceLayout(1, mma))
    mask_m = offs_m < M
    segments = gl.cdiv(num_kb, SEG_KB)
    base = 0  # ring position of the unit's first K block
    for u in range(gl.program_id(0), units, gl.num_programs(0)):
        off_n, kb_lo, count = _unit(u, num_kb, SEG_KB, BLOCK_N, WHOLE)
        offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
        mask_n = offs_n < N
        sa_ptrs = sa_ptr + offs_m * stride_sam + kb_lo * stride_sak
        if UNIFORM_SB:
            sb_ptrs = sb_ptr + (off_n // SCALE_BN) * stride_sbn + kb_lo * stride_sbk
        else:
            sb_ptrs = sb_ptr + (offs_n // SCALE_BN) * stride_sbn + kb_lo * stride_sbk
        zero = gl.zeros([WARPGROUP_ROWS, BLOCK_N], gl.float32, mma)  # made per unit: no 64 registers held across
        offs = offs_m[:, None].to(gl.int64) * stride_om + offs_n[None, :] * stride_on
        mask = mask_m[:, None] & mask_n[None, :]
        if WHOLE:
            total.store(zero)
            seg = _tile_product(a_bufs, b_bufs, ready, empty, total, zero, base, count, SEG_KB, sa_ptrs, sb_ptrs,
                                stride_sak, stride_sbk, mask_m, mask_n, STAGES, UNROLL,
                                UNIFORM_SB, mma, True)
            gl.store(out_ptr + offs, (total.load(mma) + seg).to(out_ptr.dtype.element_ty), mask=mask)
        else:
            seg = _tile_product(a_bufs, b_bufs, ready, empty, None, zero, base, count, count, sa_ptrs, sb_ptrs,
                                stride_sak, stride_sbk, mask_m, mask_n, STAGES, UNROLL,
                                UNIFORM_SB, mma, False)
            gl.store(out_ptr + (u % segments) * stride_seg + offs, seg, mask=mask)
        base += count


@gluon.jit
def _gluon_decode_gemm_kernel(
    a_desc, b_desc, out_ptr, sa_ptr, sb_ptr,
    M, N, K, SEG_KB, units,
    stride_seg, stride_om, stride_on, stride_sam, stride_sak, stride_sbn, stride_sbk,
    SCALE_BN: gl.constexpr, STAGES: gl.constexpr, UNROLL: gl.constexpr, WHOLE: gl.constexpr,
):
    """Decode sizes (M <= 64): programs walk units pid, pid + programs, ... of (column tile, K segment), or
    WHOLE of column tiles, one TMA warp and one MMA warpgroup each: every segment's sum goes to out
    [segments, M, N] for its reader, or WHOLE, c [M, N] to out."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs, b_bufs, ready, empty = _ring(a_desc, b_desc, WARPGROUP_ROWS, BLOCK_N, STAGES, 1)
    if WHOLE:
        total = gl.allocate_shared_memory(
            gl.float32, [WARPGROUP_ROWS, BLOCK_N],
            gl.NVMMASharedLayout.get_default_for([WARPGROUP_ROWS, BLOCK_N], gl.float32))
    else:
        total = ready  # never read: a split launch keeps no total (warp_specialize takes no None)
    num_kb = gl.cdiv(K, BLOCK_K)
    gl.warp_specialize([
        (_decode_mma_partition, (a_bufs, b_bufs, ready, empty, total, out_ptr, sa_ptr, sb_ptr, M, N, units,
                                 num_kb, SEG_KB, stride_seg, stride_om, stride_on, stride_sam, stride_sak,
                                 stride_sbn, stride_sbk, BLOCK_N, SCALE_BN, STAGES, UNROLL, WHOLE)),
        (_decode_load_partition, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, units, num_kb, SEG_KB, STAGES,
                                  WHOLE)),
    ], [1], [40])


_FP8_GL = {torch.float8_e4m3fn: gl.float8e4nv, torch.float8_e5m2: gl.float8e5}
_GL = {**_FP8_GL, torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}
_TRITON = tuple(int(part) for part in triton.__version__.split(".")[:2])
SHARED_BYTES = 227 * 1024  # dynamic shared memory a Hopper program may take


def _descriptor(x: torch.Tensor, rows: int, cols: int = BLOCK_K) -> TensorDescriptor:
    """TMA blocks of rows x cols of x: an FP8 operand's K blocks, or (cols = block_n) an output tile half. The
    launch encodes it on this thread, which must have a current context: every launch makes it current once
    (`cuda_context`)."""
    return TensorDescriptor.from_tensor(x, [rows, cols], _shared_layout(rows, cols, x.dtype))


@functools.cache
def _shared_layout(rows: int, cols: int, dtype: torch.dtype) -> gl.NVMMASharedLayout:
    """The swizzled shared layout of a rows x cols TMA block (cached: building one costs host time per launch)."""
    return gl.NVMMASharedLayout.get_default_for([rows, cols], _GL[dtype])


# Gluon's API moves between Triton releases (3.9 replaced the TMA copies this kernel calls), so it runs only on
# the release its bits were checked on; any other takes the Triton kernel, which gives the same bits.
GLUON_TRITON = (3, 6)


def runs(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether this kernel takes these operands: Triton 3.6, Hopper, FP8, K-major with TMA-legal strides."""
    def tma_ok(x):
        return x.dtype in _FP8_GL and x.stride(1) == 1 and x.stride(0) % 16 == 0 and x.data_ptr() % 16 == 0

    return (_TRITON == GLUON_TRITON and a.is_cuda and _device(a.device.index or 0).major == 9 and tma_ok(a)
            and tma_ok(b))


@dataclass(frozen=True)
class DecodeConfig:
    """A decode launch (M <= 64): weight rows per unit, ring slots, programs per SM, K blocks per loop trip,
    and whole tiles (one unit per column tile, its segments summed in the kernel) or one unit per segment.
    Numerics-neutral."""

    block_n: int = 128
    stages: int = 4
    per_sm: int = 1
    unroll: int = 2
    whole: bool = False


DECODE = DecodeConfig()


def gluon_decode_gemm(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor, *,
                      b_scale_rows: int, seg_kb: int, out_dtype: torch.dtype = torch.bfloat16,
                      config: DecodeConfig = DECODE) -> torch.Tensor:
    """`triton_gemm.block_scaled_gemm`'s bits at M <= 64: c [M, N] in out_dtype with `config.whole` or a single
    segment of `seg_kb` blocks, else the FP32 segment sums [segments, M, N] that `triton_gemm` adds in order."""
    m, k = a.shape
    n = b.shape[0]
    segments = triton.cdiv(triton.cdiv(k, BLOCK_K), seg_kb)
    whole = config.whole or segments == 1
    out = torch.empty((m, n) if whole else (segments, m, n), dtype=out_dtype if whole else torch.float32,
                      device=a.device)
    if m == 0 or n == 0:
        return out
    units = triton.cdiv(n, config.block_n) * (1 if whole else segments)
    slots = config.per_sm * _device(a.device.index or 0).multi_processor_count
    # equal shares but for the last few, as triton_gemm._balanced_programs (which this module may not import)
    programs = triton.cdiv(units, triton.cdiv(units, slots))
    make_context_current(a.device)
    _gluon_decode_gemm_kernel[(programs,)](
        _descriptor(a, WARPGROUP_ROWS.value), _descriptor(b, config.block_n), out, a_scale, b_scale,
        m, n, k, seg_kb, units,
        0 if whole else out.stride(0), out.stride(-2), out.stride(-1), a_scale.stride(0), a_scale.stride(1),
        b_scale.stride(0), b_scale.stride(1),
        SCALE_BN=b_scale_rows, STAGES=config.stages, UNROLL=config.unroll, WHOLE=whole, num_warps=4,
        **launch_options(m, a.device),
    )
    return out


@functools.cache
def _device(index: int):
    return torch.cuda.get_device_properties(index)


def gluon_block_scaled_gemm(
    a: torch.Tensor,
    a_scale: torch.Tensor,
    b: torch.Tensor,
    b_scale: torch.Tensor,
    *,
    b_scale_rows: int,
    seg_kb: int,
    out_dtype: torch.dtype = torch.bfloat16,
    config: GluonConfig | None = None,
) -> torch.Tensor:
    """c = dequant(a) @ dequant(b)^T with `triton_gemm.block_scaled_gemm`'s bits (same `seg_kb`); operands as
    there, K-major and TMA-legal (`runs`). `config` defaults to `training_config(N, K)`."""
    m, k = a.shape
    n = b.shape[0]
    config = config or training_config(n, k)
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    tiles = triton.cdiv(m, TILE_M) * triton.cdiv(n, config.block_n)
    programs = min(tiles, _device(a.device.index or 0).multi_processor_count) if config.persistent else tiles
    tma_store = (n * c.element_size()) % 16 == 0  # TMA needs 16-byte row strides (c is contiguous)
    split = config.split_n and tma_store and b_scale_rows % config.block_n == 0 and _even_segments(k, seg_kb)
    c_desc = _descriptor(c, WARPGROUP_ROWS.value, config.block_n // (2 if split else 1)) if tma_store else c
    make_context_current(a.device)
    _gluon_block_gemm_kernel[(programs,)](
        _descriptor(a, TILE_M), _descriptor(b, config.block_n), c_desc, c, a_scale, b_scale,
        m, n, k, seg_kb,
        c.stride(0), c.stride(1), a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1),
        SCALE_BN=b_scale_rows, GROUP_M=config.group_m,
        STAGES=_ring_slots(config, c.element_size() if tma_store else 0), TMA_STORE=tma_store, SPLIT_N=split,
        num_warps=4,
    )
    return c


def _even_segments(k: int, seg_kb: int) -> bool:
    """Whether every K segment has an even number of blocks, as the column split walks them (in pairs). A
    version that ran a segment's odd last block alone, under a branch, ran 25-30% slower on every shape
    (H200, 2026-12-02: 0.75-1.22x BF16 where this one runs 1.17-1.45x)."""
    return seg_kb % 2 == 0 and triton.cdiv(k, BLOCK_K) % 2 == 0


def _ring_slots(config: GluonConfig, out_bytes: int) -> int:
    """config.stages, or fewer where the epilogue's shared buffer (two 64-row halves of a tile of out_bytes
    elements) would leave the ring too little of the H200's 227 KiB."""
    slot = (TILE_M + config.block_n) * BLOCK_K  # one FP8 `a` tile and one `b` tile
    epilogue = TILE_M * config.block_n * out_bytes
    return min(config.stages, (SHARED_BYTES - epilogue - 1024) // slot)  # 1 KiB: barriers and alignment
