"""Decode (M <= 64) with one K segment, in Gluon for Hopper: the bits of pinned cuBLAS, at split-K speed.

With one segment a row's sum is one chain over the K blocks, chain = fma(D_kb, sa * sb, chain) in increasing kb
(`triton_gemm`, seg_kb = every block), which is pinned cuBLAS's promotion exactly. No split-K may cut the chain,
so a narrow weight has only N / 64 programs (wgmma's least M), 64 of 132 SMs at N = 4096, and each must stream
its 64 weight rows two to three times faster than the earlier one-chain launches did (0.9-1.2x BF16, fifteenth
session: each K block waited for its wgmma and its promotion before the next block's wgmma went in). Here:

- the weight sits on wgmma's 64-row side and the tokens on the narrow side (8..64 columns), so a ring slot is
  a 64x128 weight tile and a token tile only as tall as the tokens need, and 8-16 slots fit;
- the MMA warpgroup keeps AHEAD wgmmas in flight behind the block it promotes, over trips of TRIP unrolled
  blocks; each trip drains, because ptxas serialises wgmmas in flight across a loop's back edge, and a fully
  unrolled K loop kept every block's shared-memory descriptors live and spilled;
- more than 16 tokens split over several programs per weight tile where they still fit on the SMs in one wave
  (`chain_config`); the tile's second read comes from L2;
- every block's product goes into a fresh accumulator (use_acc=False) and joins the chain in order, so the
  additions are those of every other launch with one segment: bitwise equal to pinned cuBLAS on the H200
  (BF16 and FP32 out, M = 1 .. 64, every narrow 8B shape; tests/numerics/gpu/test_gemm_gpu.py).

H200, GEMM alone, graph replays (sixteenth session): 4096x4096 1.47 / 1.39 / 1.09x BF16 at M = 1 / 16 / 64
against the split-K launch's 1.42 / 1.25 / 1.05; the fused qkv 1.55 / 1.39 / 1.06 against 1.45 / 1.18 / 1.06;
down_proj (4096x14336) 1.56 / 1.26 / 1.17 against 1.64 / 1.40 / 1.43, its K being 3.5 times as long.

GPU only (Hopper, sm_90, Triton 3.6, as `gluon_gemm`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from precision_engine.numerics.gluon_gemm import (BLOCK_K, SHARED_BYTES, WARPGROUP_ROWS, _descriptor, _device,
                                                  _fill, _ring, _wait_for_producer)
from precision_engine.numerics.pdl import launch_options


@gluon.jit
def _chain_load_partition(w_desc, x_desc, w_bufs, x_bufs, ready, empty, num_kb, STAGES: gl.constexpr):
    """The TMA warp: this program's weight tile and token tile, K block by K block, into the ring. (Sending the
    first ring's weight tiles before the wait for the token quantizer gained nothing: call 1.)"""
    off_w = gl.program_id(0) * w_desc.block_type.shape[0]
    off_t = gl.program_id(1) * x_desc.block_type.shape[0]
    _wait_for_producer()  # launched with PDL (`pdl`): the tokens and their scales are written
    for kb in range(num_kb):
        _fill(w_desc, x_desc, w_bufs, x_bufs, ready, empty, kb, off_w, off_t, kb, STAGES)


@gluon.jit
def _issue(w_bufs, x_bufs, ready, it, zero, STAGES: gl.constexpr):
    """The product (weight rows x tokens) of the block at ring position `it` into a fresh accumulator,
    asynchronously."""
    slot = it % STAGES
    mbarrier.wait(ready.index(slot), (it // STAGES) & 1)
    return warpgroup_mma(w_bufs.index(slot), x_bufs.index(slot).permute((1, 0)), zero, use_acc=False,
                         is_async=True)


@gluon.jit
def _block_scales(sw_ptrs, sx_ptrs, kb, stride_swk, stride_sxk, mask_t):
    """Block kb's weight scales (per weight row) and token scales (per token); their product is formed where
    the block is promoted, which holds fewer registers than the [rows, tokens] product would."""
    sw = gl.load(sw_ptrs + kb * stride_swk)
    sx = gl.load(sx_ptrs + kb * stride_sxk, mask=mask_t, other=0.0)
    return sw, sx


@gluon.jit
def _chain_mma_partition(w_bufs, x_bufs, ready, empty, c_ptr, sx_ptr, sw_ptr, M, N, num_kb, stride_cm, stride_sxm,
                         stride_sxk, stride_swn, stride_swk, SCALE_BN: gl.constexpr, STAGES: gl.constexpr,
                         TRIP: gl.constexpr, AHEAD: gl.constexpr):
    """The MMA warpgroup: K blocks in trips of TRIP (unrolled), each block's wgmma issued AHEAD blocks before it
    joins the chain; every trip drains (ptxas serialises wgmmas in flight across a loop's back edge, and an
    unrolled K loop keeps every block's descriptors live and spills). Then the chain, rounded once, is stored
    transposed into c [M, N]."""
    _wait_for_producer()
    BLOCK_W: gl.constexpr = w_bufs.type.shape[1]
    BLOCK_T: gl.constexpr = x_bufs.type.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_T, 32])
    off_w = gl.program_id(0) * BLOCK_W
    offs_w = off_w + gl.arange(0, BLOCK_W, layout=gl.SliceLayout(1, mma))
    offs_t = gl.program_id(1) * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, mma))
    mask_t = offs_t < M
    sw_ptrs = sw_ptr + (offs_w // SCALE_BN) * stride_swn  # a vector load: a scalar one stalls (gluon_gemm)
    sx_ptrs = sx_ptr + offs_t * stride_sxm
    last = num_kb - 1
    zero = gl.zeros([BLOCK_W, BLOCK_T], gl.float32, mma)
    chain = zero
    sw0, sx0 = _block_scales(sw_ptrs, sx_ptrs, 0, stride_swk, stride_sxk, mask_t)  # loaded two blocks ahead
    sw1, sx1 = _block_scales(sw_ptrs, sx_ptrs, gl.minimum(1, last), stride_swk, stride_sxk, mask_t)
    it = 0
    for kb0 in range(0, num_kb - num_kb % TRIP, TRIP):
        d0 = _issue(w_bufs, x_bufs, ready, it, zero, STAGES)  # blocks kb0 .. kb0 + AHEAD - 1 in d0 ..
        d1 = zero
        d2 = zero
        d3 = zero
        if AHEAD >= 2:
            d1 = _issue(w_bufs, x_bufs, ready, it + 1, zero, STAGES)
        if AHEAD >= 3:
            d2 = _issue(w_bufs, x_bufs, ready, it + 2, zero, STAGES)
        for j in gl.static_range(TRIP):
            if j + AHEAD < TRIP:
                incoming = _issue(w_bufs, x_bufs, ready, it + j + AHEAD, zero, STAGES)
                if AHEAD == 1:
                    d1 = incoming
                elif AHEAD == 2:
                    d2 = incoming
                else:
                    d3 = incoming
            sw2, sx2 = _block_scales(sw_ptrs, sx_ptrs, gl.minimum(kb0 + j + 2, last), stride_swk, stride_sxk,
                                     mask_t)
            # block kb0 + j done; those issued after it inside this trip stay in flight
            d0 = warpgroup_mma_wait(num_outstanding=min(AHEAD, TRIP - 1 - j), deps=(d0,))
            mbarrier.arrive(empty.index((it + j) % STAGES))
            chain = chain + d0 * (sx0[None, :] * sw0[:, None])
            d0, d1, d2 = d1, d2, d3
            sw0, sx0, sw1, sx1 = sw1, sx1, sw2, sx2
        it += TRIP
    for kb in range(num_kb - num_kb % TRIP, num_kb):  # the blocks past the last whole trip, one at a time
        d0 = _issue(w_bufs, x_bufs, ready, it, zero, STAGES)
        sw2, sx2 = _block_scales(sw_ptrs, sx_ptrs, gl.minimum(kb + 2, last), stride_swk, stride_sxk, mask_t)
        d0 = warpgroup_mma_wait(num_outstanding=0, deps=(d0,))
        mbarrier.arrive(empty.index(it % STAGES))
        chain = chain + d0 * (sx0[None, :] * sw0[:, None])
        sw0, sx0, sw1, sx1 = sw1, sx1, sw2, sx2
        it += 1
    offs = offs_t[None, :].to(gl.int64) * stride_cm + offs_w[:, None]
    gl.store(c_ptr + offs, chain.to(c_ptr.dtype.element_ty), mask=mask_t[None, :] & (offs_w < N)[:, None])


@gluon.jit
def _gluon_chain_decode_kernel(w_desc, x_desc, c_ptr, sx_ptr, sw_ptr, M, N, K, stride_cm, stride_sxm, stride_sxk,
                               stride_swn, stride_swk, SCALE_BN: gl.constexpr, STAGES: gl.constexpr,
                               TRIP: gl.constexpr, AHEAD: gl.constexpr):
    """One program per (64-row weight tile, token tile): one TMA warp, one MMA warpgroup."""
    w_bufs, x_bufs, ready, empty = _ring(w_desc, x_desc, WARPGROUP_ROWS, STAGES, 1)
    num_kb = gl.cdiv(K, w_desc.block_type.shape[1])
    gl.warp_specialize([
        (_chain_mma_partition, (w_bufs, x_bufs, ready, empty, c_ptr, sx_ptr, sw_ptr, M, N, num_kb, stride_cm,
                                stride_sxm, stride_sxk, stride_swn, stride_swk, SCALE_BN, STAGES, TRIP, AHEAD)),
        (_chain_load_partition, (w_desc, x_desc, w_bufs, x_bufs, ready, empty, num_kb, STAGES)),
    ], [1], [40])


@dataclass(frozen=True)
class ChainConfig:
    """Ring slots (at most; fewer where they do not fit), K blocks per unrolled trip, wgmmas in flight behind the
    promoted one (1 to 3), and tokens per program (0: all M in one). Numerics-neutral."""

    stages: int = 12
    trip: int = 8
    ahead: int = 3
    token_block: int = 0

    def __post_init__(self):
        # A trip issues its own blocks only, and a block in flight holds its slot: with fewer slots than wgmmas
        # in flight the TMA warp and the MMA warpgroup would wait for each other forever.
        if not (1 <= self.ahead <= 3 and self.ahead < self.trip and self.ahead < self.stages):
            raise ValueError(f"ChainConfig: need 1 <= ahead <= 3, ahead < trip and ahead < stages; got {self}")


def token_tile(m: int) -> int:
    """The token tile: wgmma's narrow side, a power of two from 8 (its least width) to 64."""
    return max(8, triton.next_power_of_2(m))


def chain_config(m: int, n: int, sms: int) -> ChainConfig:
    """The launch for M tokens against an N-row weight on `sms` SMs, from the H200 sweeps (graph replays, GEMM
    alone, benchmarks/2026-12-03/s16_calls calls 2 and 5; mean over 4096x4096, the fused qkv, down_proj and
    4096x12288, x BF16):

    - 8 tokens or fewer: 16 ring slots, trips of 16 blocks (1.58x at M = 1; 12 slots in trips of 8: 1.54x);
    - wider token tiles: 8 slots, trips of 4 blocks (at M = 16 1.39x, trips of 8 1.31x); the 64-wide tile keeps
      2 wgmmas in flight, every other 3 (more spill: ptxas, `test_gluon_compile`);
    - above 16 tokens the tokens split over programs of 16 or more while the programs still fit on the SMs in
      one wave (4096 rows at M = 32: 1.37x in two programs of 16 per weight tile, 1.31x in one of 32; at M = 64
      the fused qkv's 96 tiles stay whole: 0.89x split, 1.06x whole); splits into programs of 8 lost everywhere."""
    tiles = triton.cdiv(n, WARPGROUP_ROWS.value)
    block = token_tile(m)
    while block > 16 and tiles * triton.cdiv(m, block // 2) <= sms:
        block //= 2
    if block == 8:
        return ChainConfig(stages=16, trip=16, ahead=3, token_block=block)
    return ChainConfig(stages=8, trip=4, ahead=2 if block == 64 else 3, token_block=block)


def gluon_chain_decode_gemm(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor, *,
                            b_scale_rows: int, out_dtype: torch.dtype = torch.bfloat16,
                            config: ChainConfig | None = None) -> torch.Tensor:
    """c [M, N] = dequant(a) @ dequant(b)^T for M <= 64 with one K segment: the bits of
    `triton_gemm.block_scaled_gemm(..., seg_kb=ceil(K/128))` and of pinned cuBLAS. Operands as there, TMA-legal
    (`gluon_gemm.runs`); b_scale_rows 128 (weight blocks) or 1. `config` defaults to `chain_config`."""
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    config = config or chain_config(m, n, _device(a.device.index or 0).multi_processor_count)
    block_t = config.token_block or token_tile(m)
    stages = min(config.stages, (SHARED_BYTES - 1024) // ((WARPGROUP_ROWS.value + block_t) * BLOCK_K))
    _gluon_chain_decode_kernel[(triton.cdiv(n, WARPGROUP_ROWS.value), triton.cdiv(m, block_t))](
        _descriptor(b, WARPGROUP_ROWS.value), _descriptor(a, block_t), c, a_scale, b_scale, m, n,
        k, c.stride(0), a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1),
        SCALE_BN=b_scale_rows, STAGES=stages, TRIP=config.trip, AHEAD=config.ahead, num_warps=4,
        **launch_options(m, a.device),
    )
    return c
