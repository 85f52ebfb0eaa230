"""The wgrad pair's GEMM in Gluon for Hopper: dW = dY^T x X^T with both operands in 1x128 groups along K (the
tokens), so every K block's product takes a scale per row *and* a scale per column.

Why its own kernel: `gluon_gemm`'s training kernel promotes a block with one weight scale a tile, loaded into
registers two blocks ahead. With a scale per column each thread holds 32 of them per block, three blocks of
them at once, beside the 64-value accumulator, the segment sum and 32 column pointers: ptxas spills 1284 bytes a
thread (sm_90a, offline) and the kernel ran 0.63-0.69x BF16 (H200, nineteenth session), where cuBLAS's
1x128-by-1x128 kernel runs 900-1000 TFLOP/s against 1250-1400 for the 1x128-by-128x128 form. Here the TMA warp
copies each K block's scale vectors (M-major: a [K/128, rows] view whose rows are 128 contiguous floats) into the
ring slot beside the operands, on the same barrier, and each MMA warpgroup reads its 64 rows' and 128 columns'
scales from shared memory while its wgmma runs: no prefetch registers, no pointers.

The additions are `triton_gemm`'s with one K segment (`segment_kb`: every weight's): seg = 0, then
seg += D_kb * (sa[m, kb] * sb[n, kb]) in increasing kb; out = 0 + seg, rounded once to the output dtype. So the
output has the bits of the Triton kernel (GPU-tested in tests/numerics/gpu/test_gemm_gpu.py).

GPU only (Hopper, sm_90, Triton 3.6): on the CPU the Triton kernel in the interpreter stands in.
"""

from __future__ import annotations

import functools

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from precision_engine.numerics import gluon_gemm
from precision_engine.numerics.gluon_gemm import BLOCK_K, TILE_M, WARPGROUP_ROWS, _descriptor, _next_slot, _ring, _tile

BLOCK_N = 128
STAGES = 6  # at most: fewer where the epilogue's buffer leaves no room (`_ring_slots`)
GROUP_M = 8  # programs sharing a column of `a` tiles run together (L2 reuse)


@gluon.jit
def _load_partition(a_desc, b_desc, sa_desc, sb_desc, a_bufs, b_bufs, sa_bufs, sb_bufs, ready, empty, M, N, num_kb,
                    GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """The TMA warp: for each of this program's tiles and K blocks, waits for the ring slot to be released, then
    copies K block kb of `a` and `b` and their scale vectors into it, all arriving on its `ready` barrier."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    nbytes: gl.constexpr = (a_desc.block_type.nbytes + b_desc.block_type.nbytes + sa_desc.block_type.nbytes
                            + sb_desc.block_type.nbytes)
    it = 0
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        off_m, off_n = _tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for kb in range(num_kb):
            slot = it % STAGES
            mbarrier.wait(empty.index(slot), ((it // STAGES) & 1) ^ 1)
            bar = ready.index(slot)
            mbarrier.expect(bar, nbytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, kb * BLOCK_K], bar, a_bufs.index(slot))
            tma.async_copy_global_to_shared(b_desc, [off_n, kb * BLOCK_K], bar, b_bufs.index(slot))
            tma.async_copy_global_to_shared(sa_desc, [kb, off_m], bar, sa_bufs.index(slot))
            tma.async_copy_global_to_shared(sb_desc, [kb, off_n], bar, sb_bufs.index(slot))
            it += 1


@gluon.jit
def _mma_partition(a_bufs, b_bufs, sa_bufs, sb_bufs, ready, empty, c_desc, c_bufs, M, N, num_kb,
                   ROW0: gl.constexpr, ROWS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """One MMA warpgroup: rows ROW0 .. ROW0 + ROWS of each of this program's tiles. Per K block: its wgmma
    issued, the block's row and column scales read from the slot while it runs, waited for, the slot released,
    the product promoted into the sum; then the tile stored through shared memory, one TMA copy."""
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32])
    row: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])  # a scale slot is one unswizzled row
    zero = gl.zeros([ROWS, BLOCK_N], gl.float32, mma)
    c_buf = c_bufs.index(ROW0 // ROWS)
    slot = 0
    phase = 0
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        off_m, off_n = _tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        seg = zero
        for kb in range(num_kb):
            mbarrier.wait(ready.index(slot), phase)
            a = a_bufs.index(slot).slice(ROW0, ROWS)
            d = warpgroup_mma(a, b_bufs.index(slot).permute((1, 0)), zero, use_acc=False, is_async=True)
            sa = sa_bufs.index(slot)._reinterpret(gl.float32, [BLOCK_M], row).slice(ROW0, ROWS).load(
                gl.SliceLayout(1, mma))
            sb = sb_bufs.index(slot)._reinterpret(gl.float32, [BLOCK_N], row).load(gl.SliceLayout(0, mma))
            d = warpgroup_mma_wait(num_outstanding=0, deps=(d,))
            mbarrier.arrive(empty.index(slot))
            seg = seg + d * (sa[:, None] * sb[None, :])
            slot += 1
            if slot == STAGES:
                slot = 0
                phase ^= 1
        tma.store_wait(0)  # the last tile's copy has left the buffer
        c_buf.store(seg.to(c_desc.dtype))  # = (0 + seg): a sum from +0 is never -0
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [off_m + ROW0, off_n], c_buf)
    tma.store_wait(0)


@gluon.jit
def _half(a_bufs, b_bufs, slot, zero, ROW0: gl.constexpr, ROWS: gl.constexpr, COL0: gl.constexpr):
    """Ring slot `slot`'s wgmma for this warpgroup's rows and columns COL0 .. COL0 + the half's width, issued
    asynchronously into a fresh accumulator."""
    a = a_bufs.index(slot).slice(ROW0, ROWS)
    b = b_bufs.index(slot).slice(COL0, zero.shape[1])
    return warpgroup_mma(a, b.permute((1, 0)), zero, use_acc=False, is_async=True)


@gluon.jit
def _promoted(seg, d, sa_bufs, sb_bufs, slot, ROW0: gl.constexpr, ROWS: gl.constexpr, COL0: gl.constexpr,
              mma: gl.constexpr):
    """seg + d * (sa * sb) for the K block in ring slot `slot`: d's rows ROW0 .. ROW0 + ROWS and its columns from
    COL0, their scales read from the slot."""
    BLOCK_M: gl.constexpr = sa_bufs.type.shape[2]
    BLOCK_N: gl.constexpr = sb_bufs.type.shape[2]
    row: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    sa = sa_bufs.index(slot)._reinterpret(gl.float32, [BLOCK_M], row).slice(ROW0, ROWS).load(gl.SliceLayout(1, mma))
    sb = sb_bufs.index(slot)._reinterpret(gl.float32, [BLOCK_N], row).slice(COL0, d.shape[1]).load(
        gl.SliceLayout(0, mma))
    return seg + d * (sa[:, None] * sb[None, :])


@gluon.jit
def _split_mma_partition(a_bufs, b_bufs, sa_bufs, sb_bufs, ready, empty, c_desc, c_bufs, M, N, num_kb,
                         ROW0: gl.constexpr, ROWS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """`_mma_partition` with each block's product issued as two wgmmas over the tile's column halves (lo, hi),
    two blocks a trip (`gluon_gemm._split_mma_partition`'s schedule): lo(kb + 1) goes in while hi(kb) is
    promoted, hi(kb + 1) while lo(kb + 1) is, so the warpgroup keeps a wgmma on the tensor cores through three of
    its four promotions, in the registers of one 64x128 accumulator. An even number of K blocks only. Each half
    makes its columns' additions of `_mma_partition` in the same order: the same bits."""
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[1]
    HALF: gl.constexpr = BLOCK_N // 2
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 32])
    zero = gl.zeros([ROWS, HALF], gl.float32, mma)
    lo_buf, hi_buf = c_bufs.index(2 * (ROW0 // ROWS)), c_bufs.index(2 * (ROW0 // ROWS) + 1)
    slot = 0
    phase = 0
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        off_m, off_n = _tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        seg_lo = zero
        seg_hi = zero
        for kb in range(0, num_kb, 2):
            mbarrier.wait(ready.index(slot), phase)
            lo = _half(a_bufs, b_bufs, slot, zero, ROW0, ROWS, 0)
            hi = _half(a_bufs, b_bufs, slot, zero, ROW0, ROWS, HALF)
            lo = warpgroup_mma_wait(num_outstanding=1, deps=(lo,))
            seg_lo = _promoted(seg_lo, lo, sa_bufs, sb_bufs, slot, ROW0, ROWS, 0, mma)
            slot1, phase1 = _next_slot(slot, phase, STAGES)
            mbarrier.wait(ready.index(slot1), phase1)
            lo = _half(a_bufs, b_bufs, slot1, zero, ROW0, ROWS, 0)
            hi = warpgroup_mma_wait(num_outstanding=1, deps=(hi,))
            seg_hi = _promoted(seg_hi, hi, sa_bufs, sb_bufs, slot, ROW0, ROWS, HALF, mma)
            mbarrier.arrive(empty.index(slot))
            hi = _half(a_bufs, b_bufs, slot1, zero, ROW0, ROWS, HALF)
            lo = warpgroup_mma_wait(num_outstanding=1, deps=(lo,))
            seg_lo = _promoted(seg_lo, lo, sa_bufs, sb_bufs, slot1, ROW0, ROWS, 0, mma)
            hi = warpgroup_mma_wait(num_outstanding=0, deps=(hi,))
            seg_hi = _promoted(seg_hi, hi, sa_bufs, sb_bufs, slot1, ROW0, ROWS, HALF, mma)
            mbarrier.arrive(empty.index(slot1))
            slot, phase = _next_slot(slot1, phase1, STAGES)
        tma.store_wait(0)  # the last tile's copies have left the buffers
        lo_buf.store(seg_lo.to(c_desc.dtype))  # = (0 + seg): a sum from +0 is never -0
        hi_buf.store(seg_hi.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [off_m + ROW0, off_n], lo_buf)
        tma.async_copy_shared_to_global(c_desc, [off_m + ROW0, off_n + HALF], hi_buf)
    tma.store_wait(0)


@gluon.jit
def _gluon_pair_gemm_kernel(a_desc, b_desc, sa_desc, sb_desc, c_desc, M, N, K,
                            GROUP_M: gl.constexpr, STAGES: gl.constexpr, SPLIT_N: gl.constexpr = False):
    """Persistent: each program walks tiles pid, pid + programs, ... with one TMA warp and two MMA warpgroups of
    64 rows each."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs, b_bufs, ready, empty = _ring(a_desc, b_desc, BLOCK_M, BLOCK_N, STAGES, BLOCK_M // WARPGROUP_ROWS)
    sa_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BLOCK_M], sa_desc.layout)
    sb_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BLOCK_N], sb_desc.layout)
    C_COLS: gl.constexpr = c_desc.block_type.shape[1]
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [BLOCK_M // WARPGROUP_ROWS * (BLOCK_N // C_COLS),
                                                      WARPGROUP_ROWS, C_COLS], c_desc.layout)
    num_kb = gl.cdiv(K, BLOCK_K)
    if SPLIT_N:
        gl.warp_specialize([
            (_split_mma_partition, (a_bufs, b_bufs, sa_bufs, sb_bufs, ready, empty, c_desc, c_bufs, M, N, num_kb,
                                    0, WARPGROUP_ROWS, GROUP_M, STAGES)),
            (_split_mma_partition, (a_bufs, b_bufs, sa_bufs, sb_bufs, ready, empty, c_desc, c_bufs, M, N, num_kb,
                                    WARPGROUP_ROWS, WARPGROUP_ROWS, GROUP_M, STAGES)),
            (_load_partition, (a_desc, b_desc, sa_desc, sb_desc, a_bufs, b_bufs, sa_bufs, sb_bufs, ready, empty,
                               M, N, num_kb, GROUP_M, STAGES)),
        ], [4, 1], [232, 40])
    else:
        gl.warp_specialize([
            (_mma_partition, (a_bufs, b_bufs, sa_bufs, sb_bufs, ready, empty, c_desc, c_bufs, M, N, num_kb,
                              0, WARPGROUP_ROWS, GROUP_M, STAGES)),
            (_mma_partition, (a_bufs, b_bufs, sa_bufs, sb_bufs, ready, empty, c_desc, c_bufs, M, N, num_kb,
                              WARPGROUP_ROWS, WARPGROUP_ROWS, GROUP_M, STAGES)),
            (_load_partition, (a_desc, b_desc, sa_desc, sb_desc, a_bufs, b_bufs, sa_bufs, sb_bufs, ready, empty, M, N,
                               num_kb, GROUP_M, STAGES)),
        ], [4, 1], [232, 40])


@functools.cache
def _scale_layout() -> gl.NVMMASharedLayout:
    """An unswizzled row of floats: a K block's scale vector (TMA copies a swizzled row of at most 128 bytes)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)


def _scale_descriptor(scale: torch.Tensor, rows: int) -> TensorDescriptor:
    """TMA blocks of one K block's scales for `rows` operand rows: scale is [rows_total, K/128] M-major, whose
    transpose [K/128, rows_total] is contiguous."""
    return TensorDescriptor.from_tensor(scale.t(), [1, rows], _scale_layout())


def runs(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
         out_dtype: torch.dtype) -> bool:
    """Whether this kernel takes these operands: Gluon runs them (`gluon_gemm.runs`), both scales M-major with
    TMA-legal rows, and an output whose rows TMA can store."""
    def m_major(scale: torch.Tensor, rows: int) -> bool:
        return scale.t().is_contiguous() and (rows * scale.element_size()) % 16 == 0 and scale.dtype == torch.float32

    n = b.shape[0]
    return (gluon_gemm.runs(a, b) and m_major(a_scale, a.shape[0]) and m_major(b_scale, n)
            and (n * torch.empty((), dtype=out_dtype).element_size()) % 16 == 0)


def gluon_pair_gemm(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor, *,
                    out_dtype: torch.dtype = torch.bfloat16, split_n: bool | None = None,
                    stages: int = STAGES, group_m: int = GROUP_M) -> torch.Tensor:
    """c = dequant(a) @ dequant(b)^T for a [M, K] and b [N, K] FP8 in 1x128 groups along K, scales [rows, K/128]
    M-major (`runs`), with `triton_gemm.block_scaled_gemm`'s one-segment bits (b_scale_rows = 1)."""
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    tiles = triton.cdiv(m, TILE_M) * triton.cdiv(n, BLOCK_N)
    programs = min(tiles, gluon_gemm._device(a.device.index or 0).multi_processor_count)
    slot = (TILE_M + BLOCK_N) * BLOCK_K + (TILE_M + BLOCK_N) * 4  # operand tiles and their scale vectors
    stages = min(stages, (gluon_gemm.SHARED_BYTES - TILE_M * BLOCK_N * c.element_size() - 1024) // slot)
    if split_n is None:
        split_n = triton.cdiv(k, BLOCK_K) % 2 == 0
    _gluon_pair_gemm_kernel[(programs,)](
        _descriptor(a, TILE_M), _descriptor(b, BLOCK_N), _scale_descriptor(a_scale, TILE_M),
        _scale_descriptor(b_scale, BLOCK_N), _descriptor(c, WARPGROUP_ROWS.value, BLOCK_N // (2 if split_n else 1)),
        m, n, k, GROUP_M=group_m, STAGES=stages, SPLIT_N=split_n, num_warps=4,
    )
    return c
