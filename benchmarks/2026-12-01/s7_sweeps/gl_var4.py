"""Scratch: the shipped pipelined schedule with row-layout weight scales and a TMA-store epilogue."""
import torch, triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (mbarrier, tma, warpgroup_mma, warpgroup_mma_wait,
                                                             fence_async_shared)
from precision_engine.numerics.gluon_gemm import (_scaled, _tile, _load_partition, _ring, _descriptor, _issue_mma,
                                                  _release, WARPGROUP_ROWS, TILE_M, _device)
from gl_var3 import _load_row_scales, c_descriptor


@gluon.jit
def _mma_partition(a_bufs, b_bufs, ready, empty, totals, c_desc, c_bufs, c_ptr, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                   stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                   ROW0: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, SCALE_BN: gl.constexpr,
                   GROUP_M: gl.constexpr, STAGES: gl.constexpr, UNROLL: gl.constexpr):
    """One MMA warpgroup: rows ROW0 .. ROW0 + ROWS of each of this program's tiles, a wgmma per K block
    promoted with its scales, then stored. The two warpgroups share the ring but never wait for each other."""
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32])
    UNIFORM_SB: gl.constexpr = SCALE_BN % BLOCK_N == 0  # one scale row for all the tile's columns
    zero = gl.zeros([ROWS, BLOCK_N], gl.float32, mma)
    total = totals.index(ROW0 // ROWS)
    base = 0  # ring position of the tile's first K block
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        off_m, off_n = _tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        offs_m = off_m + ROW0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, mma))
        offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
        mask_m = offs_m < M
        mask_n = offs_n < N
        sa_ptrs = sa_ptr + offs_m * stride_sam
        if UNIFORM_SB:
            sb_ptrs = sb_ptr + (off_n // SCALE_BN) * stride_sbn + offs_m * 0
        else:
            sb_ptrs = sb_ptr + (offs_n // SCALE_BN) * stride_sbn
        total.store(zero)
        seg = _tile_product(a_bufs, b_bufs, ready, empty, total, zero, base, num_kb, SEG_KB, sa_ptrs, sb_ptrs,
                            stride_sak, stride_sbk, mask_m, mask_n, ROW0, ROWS, STAGES, UNROLL, UNIFORM_SB, mma, True)
        out = total.load(mma) + seg  # the last segment, never closed into the total by _release
        c_buf = c_bufs.index(ROW0 // ROWS)
        tma.store_wait(0)
        c_buf.store(out.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [off_m + ROW0, off_n], c_buf)
        base += num_kb
    tma.store_wait(0)


@gluon.jit
def _tile_product(a_bufs, b_bufs, ready, empty, total, zero, base, num_kb, SEG_KB, sa_ptrs, sb_ptrs,
                  stride_sak, stride_sbk, mask_m, mask_n, ROW0: gl.constexpr, ROWS: gl.constexpr,
                  STAGES: gl.constexpr, UNROLL: gl.constexpr, UNIFORM_SB: gl.constexpr, mma: gl.constexpr,
                  CLOSES: gl.constexpr):
    """Every K block of one tile: closed segments go to `total`, the open one is returned (CLOSES False: the
    blocks are one segment, never closed, and `total` is not used).

    Two accumulators alternate: one in flight (block kb), one being scaled (kb - 1). ptxas keeps wgmmas
    asynchronous only while none is in flight across a loop's back edge, so each trip issues UNROLL blocks
    and drains: the last block of a trip is scaled with no wgmma under it."""
    seg = zero
    d_x = zero
    d_y = zero
    sa_c, sb_c = _load_row_scales(sa_ptrs, sb_ptrs, 0, num_kb, stride_sak, stride_sbk, mask_m, mask_n, UNIFORM_SB)
    sa_n, sb_n = _load_row_scales(sa_ptrs, sb_ptrs, 1, num_kb, stride_sak, stride_sbk, mask_m, mask_n, UNIFORM_SB)
    full = num_kb - num_kb % UNROLL
    for kb0 in range(0, full, UNROLL):
        d_x = _issue_mma(a_bufs, b_bufs, ready, base + kb0, d_x, ROW0, ROWS, STAGES)
        for j in gl.static_range(1, UNROLL):
            sa_f, sb_f = _load_row_scales(sa_ptrs, sb_ptrs, kb0 + j + 1, num_kb, stride_sak, stride_sbk, mask_m, mask_n,
                                      UNIFORM_SB)
            if j % 2 == 1:
                d_y = _issue_mma(a_bufs, b_bufs, ready, base + kb0 + j, d_y, ROW0, ROWS, STAGES)
                d_x = warpgroup_mma_wait(num_outstanding=1, deps=(d_x,))
                seg = _release(d_x, sa_c, sb_c, seg, total, empty, base + kb0 + j - 1, kb0 + j - 1, num_kb, SEG_KB,
                               STAGES, mma, UNIFORM_SB, CLOSES)
            else:
                d_x = _issue_mma(a_bufs, b_bufs, ready, base + kb0 + j, d_x, ROW0, ROWS, STAGES)
                d_y = warpgroup_mma_wait(num_outstanding=1, deps=(d_y,))
                seg = _release(d_y, sa_c, sb_c, seg, total, empty, base + kb0 + j - 1, kb0 + j - 1, num_kb, SEG_KB,
                               STAGES, mma, UNIFORM_SB, CLOSES)
            sa_c, sb_c, sa_n, sb_n = sa_n, sb_n, sa_f, sb_f
        sa_f, sb_f = _load_row_scales(sa_ptrs, sb_ptrs, kb0 + UNROLL + 1, num_kb, stride_sak, stride_sbk, mask_m, mask_n,
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
        d_x = _issue_mma(a_bufs, b_bufs, ready, base + kb, d_x, ROW0, ROWS, STAGES)
        d_x = warpgroup_mma_wait(num_outstanding=0, deps=(d_x,))
        seg = _release(d_x, sa_c, sb_c, seg, total, empty, base + kb, kb, num_kb, SEG_KB, STAGES, mma, UNIFORM_SB,
                       CLOSES)
        sa_c, sb_c = sa_n, sb_n
        sa_n, sb_n = _load_row_scales(sa_ptrs, sb_ptrs, kb + 2, num_kb, stride_sak, stride_sbk, mask_m, mask_n,
                                  UNIFORM_SB)
    return seg

@gluon.jit
def _gluon_block_gemm_kernel(
    a_desc, b_desc, c_desc, c_ptr, sa_ptr, sb_ptr,
    M, N, K, SEG_KB,
    stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
    SCALE_BN: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, UNROLL: gl.constexpr,
):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs, b_bufs, ready, empty = _ring(a_desc, b_desc, BLOCK_M, STAGES, BLOCK_M // WARPGROUP_ROWS)
    total_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([WARPGROUP_ROWS, BLOCK_N], gl.float32)
    totals = gl.allocate_shared_memory(gl.float32, [BLOCK_M // WARPGROUP_ROWS, WARPGROUP_ROWS, BLOCK_N],
                                       total_layout)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [BLOCK_M // WARPGROUP_ROWS, WARPGROUP_ROWS, BLOCK_N],
                                       c_desc.layout)
    num_kb = gl.cdiv(K, BLOCK_K)
    gl.warp_specialize([
        (_mma_partition, (a_bufs, b_bufs, ready, empty, totals, c_desc, c_bufs, c_ptr, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                          stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                          0, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES, UNROLL)),
        (_mma_partition, (a_bufs, b_bufs, ready, empty, totals, c_desc, c_bufs, c_ptr, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                          stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                          WARPGROUP_ROWS, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES, UNROLL)),
        (_load_partition, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, num_kb, GROUP_M, STAGES)),
    ], [4, 1], [232, 40])


def serial_gemm(a, a_scale, b, b_scale, *, b_scale_rows, seg_kb, out_dtype=torch.bfloat16, block_n=128, stages=4,
                group_m=8, unroll=4, tma_store=True):
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    tiles = triton.cdiv(m, TILE_M) * triton.cdiv(n, block_n)
    programs = min(tiles, _device(a.device.index or 0).multi_processor_count)
    _gluon_block_gemm_kernel[(programs,)](
        _descriptor(a, TILE_M), _descriptor(b, block_n), c_descriptor(c, block_n), c, a_scale, b_scale, m, n, k, seg_kb,
        c.stride(0), c.stride(1), a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1),
        SCALE_BN=b_scale_rows, GROUP_M=group_m, STAGES=stages, UNROLL=unroll, num_warps=4)
    return c
