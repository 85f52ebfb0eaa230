"""Session 10 experiment: the training Gluon GEMM with each warpgroup's 64x128 block product issued as two
64x64 wgmmas (column halves), so a warpgroup promotes one half while its other half is on the tensor cores.
Same additions per element as gluon_gemm._mma_partition (seg += D_kb * (sa * sb); total += seg per segment)."""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)

from precision_engine.numerics import gluon_gemm as G
from precision_engine.numerics.gluon_gemm import (TILE_M, WARPGROUP_ROWS, _load_partition, _load_scales,
                                                  _row_scale_ptrs, _ring, _tile)


@gluon.jit
def _half_mma(a_bufs, b_bufs, slot, acc, ROW0: gl.constexpr, ROWS: gl.constexpr, COL0: gl.constexpr,
              HALF: gl.constexpr):
    a = a_bufs.index(slot).slice(ROW0, ROWS)
    b = b_bufs.index(slot).slice(COL0, HALF)
    return warpgroup_mma(a, b.permute((1, 0)), acc, use_acc=False, is_async=True)


@gluon.jit
def _split_partition(a_bufs, b_bufs, ready, empty, c_desc, c_bufs, tot, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                     stride_sam, stride_sak, stride_sbn, stride_sbk,
                     ROW0: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, SCALE_BN: gl.constexpr,
                     GROUP_M: gl.constexpr, STAGES: gl.constexpr, TOTAL_SMEM: gl.constexpr):
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
        if TOTAL_SMEM:
            tot.index(ROW0 // ROWS).store(zero)
        sa_0, sb_0 = _load_scales(sa_ptrs, sb_ptrs, 0, num_kb, stride_sak, stride_sbk, mask_m, mask_m, True, True)
        sa_1, sb_1 = _load_scales(sa_ptrs, sb_ptrs, 1, num_kb, stride_sak, stride_sbk, mask_m, mask_m, True, True)
        for s0 in range(0, num_kb, SEG_KB):
            seg_lo = zero
            seg_hi = zero
            for kb in range(s0, min(s0 + SEG_KB, num_kb), 2):  # SEG_KB and num_kb even (the 8B shapes)
                sa_2, sb_2 = _load_scales(sa_ptrs, sb_ptrs, kb + 2, num_kb, stride_sak, stride_sbk, mask_m, mask_m,
                                          True, True)
                s_a = sa_0 * sb_0
                mbarrier.wait(ready.index(slot), phase)
                lo = _half_mma(a_bufs, b_bufs, slot, zero, ROW0, ROWS, 0, HALF)
                hi = _half_mma(a_bufs, b_bufs, slot, zero, ROW0, ROWS, HALF, HALF)
                lo = warpgroup_mma_wait(num_outstanding=1, deps=(lo,))
                seg_lo = seg_lo + lo * s_a[:, None]
                sa_3, sb_3 = _load_scales(sa_ptrs, sb_ptrs, kb + 3, num_kb, stride_sak, stride_sbk, mask_m, mask_m,
                                          True, True)
                s_b = sa_1 * sb_1
                slot1 = slot + 1
                phase1 = phase
                if slot1 == STAGES:
                    slot1 = 0
                    phase1 = phase ^ 1
                mbarrier.wait(ready.index(slot1), phase1)
                lo = _half_mma(a_bufs, b_bufs, slot1, zero, ROW0, ROWS, 0, HALF)
                hi = warpgroup_mma_wait(num_outstanding=1, deps=(hi,))
                mbarrier.arrive(empty.index(slot))
                seg_hi = seg_hi + hi * s_a[:, None]
                hi = _half_mma(a_bufs, b_bufs, slot1, zero, ROW0, ROWS, HALF, HALF)
                lo = warpgroup_mma_wait(num_outstanding=1, deps=(lo,))
                seg_lo = seg_lo + lo * s_b[:, None]
                hi = warpgroup_mma_wait(num_outstanding=0, deps=(hi,))
                mbarrier.arrive(empty.index(slot1))
                seg_hi = seg_hi + hi * s_b[:, None]
                sa_0, sb_0, sa_1, sb_1 = sa_2, sb_2, sa_3, sb_3
                slot = slot1 + 1
                phase = phase1
                if slot == STAGES:
                    slot = 0
                    phase = phase1 ^ 1
            total_lo = total_lo + seg_lo
            if TOTAL_SMEM:
                if s0 + SEG_KB < num_kb:
                    tot.index(ROW0 // ROWS).store(tot.index(ROW0 // ROWS).load(mma) + seg_hi)
                else:
                    total_hi = tot.index(ROW0 // ROWS).load(mma) + seg_hi
            else:
                total_hi = total_hi + seg_hi
        base = (ROW0 // ROWS) * 2
        tma.store_wait(0)
        c_bufs.index(base).store(total_lo.to(c_desc.dtype))
        c_bufs.index(base + 1).store(total_hi.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [off_m + ROW0, off_n], c_bufs.index(base))
        tma.async_copy_shared_to_global(c_desc, [off_m + ROW0, off_n + HALF], c_bufs.index(base + 1))
    tma.store_wait(0)


@gluon.jit
def _split_kernel(a_desc, b_desc, c_desc, sa_ptr, sb_ptr, M, N, K, SEG_KB,
                  stride_sam, stride_sak, stride_sbn, stride_sbk,
                  SCALE_BN: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, REGS: gl.constexpr,
                  TOTAL_SMEM: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    HALF: gl.constexpr = BLOCK_N // 2
    a_bufs, b_bufs, ready, empty = _ring(a_desc, b_desc, BLOCK_M, STAGES, BLOCK_M // WARPGROUP_ROWS)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [2 * (BLOCK_M // WARPGROUP_ROWS), WARPGROUP_ROWS, HALF],
                                       c_desc.layout)
    if TOTAL_SMEM:
        tot = gl.allocate_shared_memory(gl.float32, [BLOCK_M // WARPGROUP_ROWS, WARPGROUP_ROWS, HALF],
                                        gl.NVMMASharedLayout.get_default_for([WARPGROUP_ROWS, HALF], gl.float32))
    else:
        tot = ready
    num_kb = gl.cdiv(K, BLOCK_K)
    gl.warp_specialize([
        (_split_partition, (a_bufs, b_bufs, ready, empty, c_desc, c_bufs, tot, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                            stride_sam, stride_sak, stride_sbn, stride_sbk,
                            0, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES, TOTAL_SMEM)),
        (_split_partition, (a_bufs, b_bufs, ready, empty, c_desc, c_bufs, tot, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                            stride_sam, stride_sak, stride_sbn, stride_sbk,
                            WARPGROUP_ROWS, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES, TOTAL_SMEM)),
        (_load_partition, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, num_kb, GROUP_M, STAGES)),
    ], [4, 1], [REGS, 40])


def split_gemm(a, a_scale, b, b_scale, *, b_scale_rows, seg_kb, block_n=128, stages=6, group_m=8, regs=232, total_smem=False):
    m, k = a.shape
    n = b.shape[0]
    assert b_scale_rows % block_n == 0 and seg_kb % 2 == 0 and triton.cdiv(k, 128) % 2 == 0 and (2 * n) % 16 == 0
    c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    tiles = triton.cdiv(m, TILE_M) * triton.cdiv(n, block_n)
    programs = min(tiles, G._device(a.device.index or 0).multi_processor_count)
    spare = G.SHARED_BYTES - TILE_M * block_n * 2 - (TILE_M * block_n * 2 if total_smem else 0) - 1024
    stages = min(stages, spare // ((TILE_M + block_n) * 128))
    _split_kernel[(programs,)](
        G._descriptor(a, TILE_M), G._descriptor(b, block_n), G._descriptor(c, 64, block_n // 2), a_scale, b_scale,
        m, n, k, seg_kb, a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1),
        SCALE_BN=b_scale_rows, GROUP_M=group_m, STAGES=stages, REGS=regs, TOTAL_SMEM=total_smem,
        num_warps=4)
    return c
