"""Scratch: Gluon training GEMM schedule variants (session 7). Reuses the shipped module's helpers."""
import torch, triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (mbarrier, tma, warpgroup_mma, warpgroup_mma_wait,
                                                             fence_async_shared)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from precision_engine.numerics import gluon_gemm as G
from precision_engine.numerics.gluon_gemm import (_load_scales, _scaled, _tile, _load_partition, _ring, _descriptor,
                                                  WARPGROUP_ROWS, TILE_M, _device)

_descriptor = _descriptor


@gluon.jit
def _load_row_scales(sa_ptrs, sb_ptrs, kb, num_kb, stride_sak, stride_sbk, mask_m, mask_n, UNIFORM_SB: gl.constexpr):
    live = kb < num_kb
    sa = gl.load(sa_ptrs + kb * stride_sak, mask=mask_m & live, other=0.0)
    if UNIFORM_SB:
        sb = gl.load(sb_ptrs + kb * stride_sbk, mask=mask_m & live, other=0.0)
    else:
        sb = gl.load(sb_ptrs + kb * stride_sbk, mask=mask_n & live, other=0.0)
    return sa, sb


@gluon.jit
def _serial_mma_partition(a_bufs, b_bufs, ready, empty, turn, c_desc, c_bufs, c_ptr, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                          stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                          ROW0: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, SCALE_BN: gl.constexpr,
                          GROUP_M: gl.constexpr, STAGES: gl.constexpr, TMA_STORE: gl.constexpr, PINGPONG: gl.constexpr,
                          ACC_ONLY: gl.constexpr):
    """Each K block: wgmma, wait for it, release the slot, promote. The other warpgroup's wgmma runs under this
    one's promotion; the running total lives in registers."""
    BLOCK_M: gl.constexpr = a_bufs.type.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32])
    UNIFORM_SB: gl.constexpr = SCALE_BN % BLOCK_N == 0
    slot = 0
    phase = 0
    turn_phase = 0
    ME: gl.constexpr = ROW0 // ROWS
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        off_m, off_n = _tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        offs_m = off_m + ROW0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, mma))
        offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
        mask_m = offs_m < M
        mask_n = offs_n < N
        sa_ptrs = sa_ptr + offs_m * stride_sam
        if UNIFORM_SB:  # one address, loaded by every thread: a scalar load would be moved to a uniform register
            sb_ptrs = sb_ptr + (off_n // SCALE_BN) * stride_sbn + offs_m * 0  # at once, stalling the wgmma issue
        else:
            sb_ptrs = sb_ptr + (offs_n // SCALE_BN) * stride_sbn
        zero = gl.zeros([ROWS, BLOCK_N], gl.float32, mma)
        total = zero
        sa_c, sb_c = _load_row_scales(sa_ptrs, sb_ptrs, 0, num_kb, stride_sak, stride_sbk, mask_m, mask_n, UNIFORM_SB)
        sa_n, sb_n = _load_row_scales(sa_ptrs, sb_ptrs, 1, num_kb, stride_sak, stride_sbk, mask_m, mask_n, UNIFORM_SB)
        for s0 in range(0, num_kb, SEG_KB):
            seg = zero
            for kb in range(s0, min(s0 + SEG_KB, num_kb)):
                sa_f, sb_f = _load_row_scales(sa_ptrs, sb_ptrs, kb + 2, num_kb, stride_sak, stride_sbk, mask_m, mask_n,
                                          UNIFORM_SB)
                mbarrier.wait(ready.index(slot), phase)
                a = a_bufs.index(slot).slice(ROW0, ROWS)
                if PINGPONG:  # wgmmas issued in turns: WG0 kb, WG1 kb, WG0 kb+1, ...
                    mbarrier.wait(turn.index(ME), turn_phase ^ (1 - ME))
                if ACC_ONLY:  # diagnostic: no promotion (wrong numerics), the pipeline's ceiling
                    d = warpgroup_mma(a, b_bufs.index(slot).permute((1, 0)), seg, use_acc=True, is_async=True)
                else:
                    d = warpgroup_mma(a, b_bufs.index(slot).permute((1, 0)), zero, use_acc=False, is_async=True)
                if PINGPONG:
                    mbarrier.arrive(turn.index(1 - ME))
                    turn_phase ^= 1
                d = warpgroup_mma_wait(num_outstanding=0, deps=(d,))
                mbarrier.arrive(empty.index(slot))
                if ACC_ONLY:
                    seg = d
                else:
                    seg = seg + _scaled(d, sa_c, sb_c, UNIFORM_SB)
                sa_c, sb_c, sa_n, sb_n = sa_n, sb_n, sa_f, sb_f
                slot += 1
                if slot == STAGES:
                    slot = 0
                    phase ^= 1
            total = total + seg
        out = total
        if TMA_STORE:
            c_buf = c_bufs.index(ROW0 // ROWS)
            tma.store_wait(0)  # the last tile's copy has left the buffer
            c_buf.store(out.to(c_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(c_desc, [off_m + ROW0, off_n], c_buf)
        else:
            c_offs = offs_m[:, None].to(gl.int64) * stride_cm + offs_n[None, :] * stride_cn
            gl.store(c_ptr + c_offs, out.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])
    if TMA_STORE:
        tma.store_wait(0)


@gluon.jit
def _gluon_block_gemm_kernel(
    a_desc, b_desc, c_desc, c_ptr, sa_ptr, sb_ptr,
    M, N, K, SEG_KB,
    stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
    SCALE_BN: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, TMA_STORE: gl.constexpr,
    PINGPONG: gl.constexpr, ACC_ONLY: gl.constexpr,
):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs, b_bufs, ready, empty = _ring(a_desc, b_desc, BLOCK_M, STAGES, BLOCK_M // WARPGROUP_ROWS)
    num_kb = gl.cdiv(K, 128)
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)
    if TMA_STORE:
        c_bufs = gl.allocate_shared_memory(c_desc.dtype, [BLOCK_M // WARPGROUP_ROWS, WARPGROUP_ROWS, BLOCK_N],
                                           c_desc.layout)
    else:
        c_bufs = ready
    gl.warp_specialize([
        (_serial_mma_partition, (a_bufs, b_bufs, ready, empty, turn, c_desc, c_bufs, c_ptr, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                                 stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                                 0, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES, TMA_STORE, PINGPONG, ACC_ONLY)),
        (_serial_mma_partition, (a_bufs, b_bufs, ready, empty, turn, c_desc, c_bufs, c_ptr, sa_ptr, sb_ptr, M, N, num_kb, SEG_KB,
                                 stride_cm, stride_cn, stride_sam, stride_sak, stride_sbn, stride_sbk,
                                 WARPGROUP_ROWS, WARPGROUP_ROWS, BLOCK_N, SCALE_BN, GROUP_M, STAGES, TMA_STORE, PINGPONG, ACC_ONLY)),
        (_load_partition, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, num_kb, GROUP_M, STAGES)),
    ], [4, 1], [232, 40])


def serial_gemm(a, a_scale, b, b_scale, *, b_scale_rows, seg_kb, out_dtype=torch.bfloat16, block_n=128, stages=6,
                group_m=8, tma_store=False, pingpong=False, acc_only=False):
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    tiles = triton.cdiv(m, TILE_M) * triton.cdiv(n, block_n)
    programs = min(tiles, _device(a.device.index or 0).multi_processor_count)
    _gluon_block_gemm_kernel[(programs,)](
        _descriptor(a, TILE_M), _descriptor(b, block_n), c_descriptor(c, block_n), c, a_scale, b_scale, m, n, k, seg_kb,
        c.stride(0), c.stride(1), a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1),
        SCALE_BN=b_scale_rows, GROUP_M=group_m, STAGES=stages, TMA_STORE=tma_store, PINGPONG=pingpong, ACC_ONLY=acc_only, num_warps=4)
    return c


_GL = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}


def c_descriptor(c, block_n):
    layout = gl.NVMMASharedLayout.get_default_for([64, block_n], _GL[c.dtype])
    return TensorDescriptor.from_tensor(c, [64, block_n], layout)
