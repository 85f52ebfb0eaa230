"""Scratch (session 7): three MMA warpgroups per 192-row tile, serial promotion, running total in shared memory."""
import torch, triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from precision_engine.numerics.gluon_gemm import (_load_scales, _row_scale_ptrs, _scaled, _tile, _load_partition,
                                                  _ring, _descriptor, WARPGROUP_ROWS, _device)


@gluon.jit
def _tri_partition(a_bufs, b_bufs, ready, empty, total, c_ptr, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                   stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                   ROW0: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, SCALE_BN: gl.constexpr,
                   GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    BLOCK_M: gl.constexpr = 3 * ROWS
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32])
    UNIFORM_SB: gl.constexpr = SCALE_BN % BLOCK_N == 0
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
        total.store(zero)
        sa_c, sb_c = _load_scales(sa_ptrs, sb_ptrs, 0, num_kb, stride_sak, stride_sbk, mask_m, mask_n, UNIFORM_SB,
                                  UNIFORM_SB)
        sa_n, sb_n = _load_scales(sa_ptrs, sb_ptrs, 1, num_kb, stride_sak, stride_sbk, mask_m, mask_n, UNIFORM_SB,
                                  UNIFORM_SB)
        seg = zero
        for s0 in range(0, num_kb, SEG_KB):
            seg = zero
            for kb in range(s0, min(s0 + SEG_KB, num_kb)):
                sa_f, sb_f = _load_scales(sa_ptrs, sb_ptrs, kb + 2, num_kb, stride_sak, stride_sbk, mask_m, mask_n,
                                          UNIFORM_SB, UNIFORM_SB)
                mbarrier.wait(ready.index(slot), phase)
                a = a_bufs.index(slot)
                d = warpgroup_mma(a, b_bufs.index(slot).permute((1, 0)), zero, use_acc=False, is_async=True)
                d = warpgroup_mma_wait(num_outstanding=0, deps=(d,))
                mbarrier.arrive(empty.index(slot))
                seg = seg + _scaled(d, sa_c, sb_c, UNIFORM_SB)
                sa_c, sb_c, sa_n, sb_n = sa_n, sb_n, sa_f, sb_f
                slot += 1
                if slot == STAGES:
                    slot = 0
                    phase ^= 1
            if s0 + SEG_KB < num_kb:
                total.store(total.load(mma) + seg)
        out = total.load(mma) + seg
        c_offs = offs_m[:, None].to(gl.int64) * stride_cm + offs_n[None, :] * stride_cn
        gl.store(c_ptr + c_offs, out.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@gluon.jit
def _tri_load_partition(a_desc, b_desc, a0, a1, a2, b_bufs, ready, empty, M, N, num_kb,
                        GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """The TMA warp for 192-row tiles: `a` in three 64-row boxes into three rings (Triton takes only
    power-of-two boxes and shared-memory shapes)."""
    BOX_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_M: gl.constexpr = 3 * BOX_M
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    slot = 0
    phase = 0
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        off_m, off_n = _tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for kb in range(num_kb):
            mbarrier.wait(empty.index(slot), phase ^ 1)
            bar = ready.index(slot)
            mbarrier.expect(bar, (BLOCK_M // BOX_M) * a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, kb * BLOCK_K], bar, a0.index(slot))
            tma.async_copy_global_to_shared(a_desc, [off_m + BOX_M, kb * BLOCK_K], bar, a1.index(slot))
            tma.async_copy_global_to_shared(a_desc, [off_m + 2 * BOX_M, kb * BLOCK_K], bar, a2.index(slot))
            tma.async_copy_global_to_shared(b_desc, [off_n, kb * BLOCK_K], bar, b_bufs.index(slot))
            slot += 1
            if slot == STAGES:
                slot = 0
                phase ^= 1


@gluon.jit
def _tri_kernel(a_desc, b_desc, c_ptr, sa_ptr, sb_ptr, M, N, K, SEG_KB,
                stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                SCALE_BN: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, REGS: gl.constexpr):
    BLOCK_M: gl.constexpr = 3 * WARPGROUP_ROWS
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a0 = gl.allocate_shared_memory(a_desc.dtype, [STAGES, WARPGROUP_ROWS, BLOCK_K], a_desc.layout)
    a1 = gl.allocate_shared_memory(a_desc.dtype, [STAGES, WARPGROUP_ROWS, BLOCK_K], a_desc.layout)
    a2 = gl.allocate_shared_memory(a_desc.dtype, [STAGES, WARPGROUP_ROWS, BLOCK_K], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=3)
    total_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([WARPGROUP_ROWS, BLOCK_N], gl.float32)
    t0 = gl.allocate_shared_memory(gl.float32, [WARPGROUP_ROWS, BLOCK_N], total_layout)
    t1 = gl.allocate_shared_memory(gl.float32, [WARPGROUP_ROWS, BLOCK_N], total_layout)
    t2 = gl.allocate_shared_memory(gl.float32, [WARPGROUP_ROWS, BLOCK_N], total_layout)
    num_kb = gl.cdiv(K, BLOCK_K)
    gl.warp_specialize([
        (_tri_partition, (a0, b_bufs, ready, empty, t0, c_ptr, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                          stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                          0, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES)),
        (_tri_partition, (a1, b_bufs, ready, empty, t1, c_ptr, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                          stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                          WARPGROUP_ROWS, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES)),
        (_tri_partition, (a2, b_bufs, ready, empty, t2, c_ptr, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                          stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                          2 * WARPGROUP_ROWS, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES)),
        (_tri_load_partition, (a_desc, b_desc, a0, a1, a2, b_bufs, ready, empty, M, N, num_kb, GROUP_M, STAGES)),
    ], [4, 4, 1], [REGS, REGS, 24])


def tri_gemm(a, a_scale, b, b_scale, *, b_scale_rows, seg_kb, out_dtype=torch.bfloat16, stages=3, group_m=8,
             regs=160):
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    tiles = triton.cdiv(m, 192) * triton.cdiv(n, 128)
    programs = min(tiles, _device(a.device.index or 0).multi_processor_count)
    _tri_kernel[(programs,)](
        _descriptor(a, 64), _descriptor(b, 128), c, a_scale, b_scale, m, n, k, seg_kb,
        c.stride(0), c.stride(1), a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1),
        SCALE_BN=b_scale_rows, GROUP_M=group_m, STAGES=stages, REGS=regs, num_warps=4)
    return c
