"""Decode (M <= 64) with one K segment, in Gluon for Hopper: the bits of pinned cuBLAS, at split-K speed.

With one segment a row's sum is one chain over the K blocks, chain = fma(D_kb, sa * sb, chain) in increasing kb
(`triton_gemm`, seg_kb = every block), which is pinned cuBLAS's promotion exactly. No split-K may cut the chain,
so a narrow weight has only N / 64 programs (wgmma's least M), 64 of 132 SMs at N = 4096, and each must stream
its 64 weight rows two to three times faster than the earlier one-chain launches did (0.9-1.2x BF16, fifteenth
session: each K block waited for its wgmma and its promotion before the next block's wgmma went in). Here:

- the weight sits on wgmma's 64-row side and the tokens on the narrow side (8..64 columns), so a ring slot is
  a 64x128 weight tile and a token tile only as tall as the tokens need, and up to 16 slots fit;
- the MMA warpgroup keeps AHEAD wgmmas in flight behind the block it promotes, over trips of TRIP unrolled
  blocks; each trip drains, because ptxas serialises wgmmas in flight across a loop's back edge, and a fully
  unrolled K loop kept every block's shared-memory descriptors live and spilled;
- every K block's scales are staged in shared memory once, at the start: read from global memory per block,
  each promotion waited an L2 round trip for them (twenty-second session);
- above 32 tokens, where 32-row weight tiles still fit on the SMs in one wave, the two sides swap: 32 weight
  rows on wgmma's narrow side, all 64 tokens on its 64-row side, so twice the programs of 64-row tiles each
  read their weight bytes alone (`chain_config`; two 32-token programs per 64-row tile read it twice). Where
  the programs outnumber the SMs, two share one, at 128 registers a thread and half its shared memory each;
- every block's product goes into a fresh accumulator (use_acc=False) and joins the chain in order, so the
  additions are those of every other launch with one segment: bitwise equal to pinned cuBLAS on the H200
  (BF16 and FP32 out, M = 1 .. 64, every narrow 8B shape; tests/numerics/gpu/test_gemm_gpu.py).

H200, GEMM alone, graph replays (twenty-second session, calls 5 and 7): 4096x4096 1.55 / 1.51 / 1.23x BF16 at
M = 1 / 16 / 64, the fused qkv 1.52 / 1.51 / 1.46, down_proj (4096x14336) 1.66 / 1.58 / 1.47, 12288x4096 1.65 /
1.67 / 1.48. Splitting K over programs (each block product stored, the last program chaining them in order: the
same bits) was slower on every row, its serial walk through the stored products costing more than it gained.

GPU only (Hopper, sm_90, Triton 3.6, as `gluon_gemm`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from precision_engine.errors import OperandError
from precision_engine.numerics.cuda_context import make_context_current
from precision_engine.numerics.gluon_gemm import (BLOCK_K, WARPGROUP_ROWS, _descriptor, _device, _ring,
                                                  _wait_for_producer)
from precision_engine.numerics.pdl import launch_options

SM_SHARED_BYTES = 228 * 1024  # a Hopper SM's shared memory, which its resident programs split
SM_REGISTERS = 65536
MAX_NARROW_WEIGHT_ROWS = 64  # on wgmma's narrow side: a 128-row slot spills (ptxas, Triton 3.6; `chain_config`)
PROGRAM_THREADS = 8 * 32  # the MMA warpgroup and the TMA warp, padded to a warpgroup (.reqntid 256)
GRAIN = gl.constexpr(8)  # rows of the TMA boxes that finish a tile's live rows (one 128-byte swizzle atom)


@gluon.jit
def _land_rows(desc, grain, dst, row, col, bar, COPIES: gl.constexpr):
    """A tile's live rows of one K block into its ring slot `dst`: a box of the descriptor's rows, then COPIES
    boxes of GRAIN rows after it, so that no box reaches past the rows the tile holds (a box past the tensor's
    last row is zero-filled by the copy engine, which cost the launch up to 40%: 33.5 against 23.8 us with 32 of
    a 64-row token tile live, twenty-third session's call 4). The slot's rows past them are never stored."""
    HEAD: gl.constexpr = desc.block_type.shape[0]
    tma.async_copy_global_to_shared(desc, [row, col], bar, dst.slice(0, HEAD))
    for i in gl.static_range(COPIES):
        tma.async_copy_global_to_shared(grain, [row + HEAD + i * GRAIN, col], bar, dst.slice(HEAD + i * GRAIN, GRAIN))


@gluon.jit
def _chain_load_partition(w_desc, w_grain, x_desc, x_grain, w_bufs, x_bufs, ready, empty, num_kb,
                          STAGES: gl.constexpr, W_COPIES: gl.constexpr, X_COPIES: gl.constexpr,
                          W_LIVE: gl.constexpr):
    """The TMA warp: this program's weight tile and token tile, K block by K block, into the ring, each slot
    once its wgmma has released it. (Sending the first ring's weight tiles before the wait for the token
    quantizer gained nothing on the GEMM alone, sixteenth session, and lost up to 7% on 14 of 18 whole-linear
    rows, twenty-third session's call 3. Sending the first 8 to 32 K blocks of the program's weight rows to L2
    before the wait instead, by the copy engine or a line at a time by the load unit, lost on the GEMM alone and
    on the whole linear, up to 0.21x at 32 blocks: forty-fourth session, `s44_calls`.) W_LIVE: the weight rows a
    program owns."""
    off_w = gl.program_id(0) * W_LIVE
    off_t = gl.program_id(1) * x_bufs.type.shape[1]
    nbytes: gl.constexpr = (w_desc.block_type.nbytes + W_COPIES * w_grain.block_type.nbytes
                            + x_desc.block_type.nbytes + X_COPIES * x_grain.block_type.nbytes)
    BLOCK: gl.constexpr = w_desc.block_type.shape[1]
    _wait_for_producer()  # launched with PDL (`pdl`): the tokens and their scales are written
    for kb in range(num_kb):
        slot = kb % STAGES
        mbarrier.wait(empty.index(slot), ((kb // STAGES) & 1) ^ 1)
        bar = ready.index(slot)
        mbarrier.expect(bar, nbytes)
        _land_rows(w_desc, w_grain, w_bufs.index(slot), off_w, kb * BLOCK, bar, W_COPIES)
        _land_rows(x_desc, x_grain, x_bufs.index(slot), off_t, kb * BLOCK, bar, X_COPIES)


@gluon.jit
def _issue(w_bufs, x_bufs, ready, it, zero, STAGES: gl.constexpr, WEIGHT_ON_M: gl.constexpr):
    """The product of the block at ring position `it` into a fresh accumulator, asynchronously: weight rows x
    tokens with WEIGHT_ON_M, else tokens x weight rows."""
    slot = it % STAGES
    mbarrier.wait(ready.index(slot), (it // STAGES) & 1)
    if WEIGHT_ON_M:
        a, b = w_bufs.index(slot), x_bufs.index(slot)
    else:
        a, b = x_bufs.index(slot), w_bufs.index(slot)
    return warpgroup_mma(a, b.permute((1, 0)), zero, use_acc=False, is_async=True)


@gluon.jit
def _stage_scales(sw_smem, sx_smem, sx_ptr, sw_ptr, off_w, off_t, M, N, num_kb, stride_sxm, stride_sxk, stride_swn,
                  stride_swk, SCALE_BN: gl.constexpr):
    """Every K block's weight scales (per weight row of the tile) and token scales into shared memory, once:
    read per block from global memory, each promotion waited a whole L2 round trip for its scales (Nsight
    Compute, twenty-second session: 31% of the MMA warps' stall samples at 16 tokens on 4096x14336)."""
    KB_PAD: gl.constexpr = sw_smem.type.shape[0]
    BLOCK_W: gl.constexpr = sw_smem.type.shape[1]
    BLOCK_T: gl.constexpr = sx_smem.type.shape[1]
    layout: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [4, 1], [1, 0])
    kb = gl.arange(0, KB_PAD, layout=gl.SliceLayout(1, layout))
    rows = off_w + gl.arange(0, BLOCK_W, layout=gl.SliceLayout(0, layout))
    toks = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, layout))
    live = (kb < num_kb)[:, None]
    sw = gl.load(sw_ptr + (rows // SCALE_BN)[None, :] * stride_swn + kb[:, None] * stride_swk,
                 mask=live & (rows < N)[None, :], other=0.0)
    sx = gl.load(sx_ptr + toks[None, :] * stride_sxm + kb[:, None] * stride_sxk, mask=live & (toks < M)[None, :],
                 other=0.0)
    whole: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
    sw_smem._reinterpret(gl.float32, [KB_PAD, BLOCK_W], whole).store(sw)
    sx_smem._reinterpret(gl.float32, [KB_PAD, BLOCK_T], whole).store(sx)


@gluon.jit
def _scale_rows(KB_PAD: gl.constexpr, WIDTH: gl.constexpr):
    """Shared memory for KB_PAD rows of WIDTH fp32 scales, plain row-major, read a K block's row at a time
    (`.index(kb)` takes a layout of rank one less than the shape; `_stage_scales` views it whole to fill it)."""
    return gl.allocate_shared_memory(gl.float32, [KB_PAD, WIDTH], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))


@gluon.jit
def _block_scales(sw_smem, sx_smem, kb, mma: gl.constexpr, WEIGHT_ON_M: gl.constexpr):
    """Block kb's weight scales (per weight row) and token scales (per token), from shared memory, as the
    accumulator's row and column vectors; their product is formed where the block is promoted, which holds fewer
    registers than the [rows, tokens] product would."""
    W_DIM: gl.constexpr = 1 if WEIGHT_ON_M else 0
    sw = sw_smem.index(kb).load(gl.SliceLayout(W_DIM, mma))
    sx = sx_smem.index(kb).load(gl.SliceLayout(1 - W_DIM, mma))
    return sw, sx


@gluon.jit
def _outer(w_vec, t_vec, WEIGHT_ON_M: gl.constexpr):
    """A weight-row vector and a token vector (the accumulator's slices) as the accumulator's two broadcast
    operands, (rows, columns) in its orientation."""
    if WEIGHT_ON_M:
        w, t = w_vec[:, None], t_vec[None, :]
    else:
        w, t = w_vec[None, :], t_vec[:, None]
    return w, t


@gluon.jit
def _promote(chain, d, sw, sx, WEIGHT_ON_M: gl.constexpr):
    """chain + d * (sx * sw): a block's product joins the chain (an FMA: the promotion of every one-segment
    launch)."""
    w, t = _outer(sw, sx, WEIGHT_ON_M)
    return chain + d * (t * w)


@gluon.jit
def _chain_mma_partition(w_bufs, x_bufs, ready, empty, sw_smem, sx_smem, c_ptr, sx_ptr, sw_ptr, M, N, num_kb,
                         stride_cm, stride_sxm, stride_sxk, stride_swn, stride_swk, SCALE_BN: gl.constexpr,
                         STAGES: gl.constexpr, TRIP: gl.constexpr, AHEAD: gl.constexpr, WEIGHT_ON_M: gl.constexpr,
                         W_LIVE: gl.constexpr):
    """The MMA warpgroup: K blocks in trips of TRIP (unrolled), each block's wgmma issued AHEAD blocks before it
    joins the chain; every trip drains (ptxas serialises wgmmas in flight across a loop's back edge, and an
    unrolled K loop keeps every block's descriptors live and spills). Then the chain, rounded once, is stored
    into c [M, N] (transposed where the weight rows are the accumulator's rows, WEIGHT_ON_M): the program's
    W_LIVE weight rows of its tile's, and its tokens."""
    _wait_for_producer()
    BLOCK_W: gl.constexpr = w_bufs.type.shape[1]
    BLOCK_T: gl.constexpr = x_bufs.type.shape[1]
    W_DIM: gl.constexpr = 1 if WEIGHT_ON_M else 0  # the accumulator's weight rows: its rows (dim 0) or columns
    NARROW: gl.constexpr = BLOCK_T if WEIGHT_ON_M else BLOCK_W
    ACC: gl.constexpr = [BLOCK_W, BLOCK_T] if WEIGHT_ON_M else [BLOCK_T, BLOCK_W]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, NARROW, 32])
    off_w = gl.program_id(0) * W_LIVE
    off_t = gl.program_id(1) * BLOCK_T
    offs_w = off_w + gl.arange(0, BLOCK_W, layout=gl.SliceLayout(W_DIM, mma))
    offs_t = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(1 - W_DIM, mma))
    _stage_scales(sw_smem, sx_smem, sx_ptr, sw_ptr, off_w, off_t, M, N, num_kb, stride_sxm, stride_sxk, stride_swn,
                  stride_swk, SCALE_BN)
    last = num_kb - 1
    zero = gl.zeros(ACC, gl.float32, mma)
    chain = zero
    sw0, sx0 = _block_scales(sw_smem, sx_smem, 0, mma, WEIGHT_ON_M)  # read two blocks ahead
    sw1, sx1 = _block_scales(sw_smem, sx_smem, gl.minimum(1, last), mma, WEIGHT_ON_M)
    it = 0
    for kb0 in range(0, num_kb - num_kb % TRIP, TRIP):
        d0 = _issue(w_bufs, x_bufs, ready, it, zero, STAGES, WEIGHT_ON_M)  # blocks kb0 .. kb0 + AHEAD - 1 in d0 ..
        d1 = zero
        d2 = zero
        d3 = zero
        if AHEAD >= 2:
            d1 = _issue(w_bufs, x_bufs, ready, it + 1, zero, STAGES, WEIGHT_ON_M)
        if AHEAD >= 3:
            d2 = _issue(w_bufs, x_bufs, ready, it + 2, zero, STAGES, WEIGHT_ON_M)
        for j in gl.static_range(TRIP):
            if j + AHEAD < TRIP:
                incoming = _issue(w_bufs, x_bufs, ready, it + j + AHEAD, zero, STAGES, WEIGHT_ON_M)
                if AHEAD == 1:
                    d1 = incoming
                elif AHEAD == 2:
                    d2 = incoming
                else:
                    d3 = incoming
            sw2, sx2 = _block_scales(sw_smem, sx_smem, gl.minimum(kb0 + j + 2, last), mma, WEIGHT_ON_M)
            # block kb0 + j done; those issued after it inside this trip stay in flight
            d0 = warpgroup_mma_wait(num_outstanding=min(AHEAD, TRIP - 1 - j), deps=(d0,))
            mbarrier.arrive(empty.index((it + j) % STAGES))
            chain = _promote(chain, d0, sw0, sx0, WEIGHT_ON_M)
            d0, d1, d2 = d1, d2, d3
            sw0, sx0, sw1, sx1 = sw1, sx1, sw2, sx2
        it += TRIP
    for kb in range(num_kb - num_kb % TRIP, num_kb):  # the blocks past the last whole trip, one at a time
        d0 = _issue(w_bufs, x_bufs, ready, it, zero, STAGES, WEIGHT_ON_M)
        sw2, sx2 = _block_scales(sw_smem, sx_smem, gl.minimum(kb + 2, last), mma, WEIGHT_ON_M)
        d0 = warpgroup_mma_wait(num_outstanding=0, deps=(d0,))
        mbarrier.arrive(empty.index(it % STAGES))
        chain = _promote(chain, d0, sw0, sx0, WEIGHT_ON_M)
        sw0, sx0, sw1, sx1 = sw1, sx1, sw2, sx2
        it += 1
    w_out, t_out = _outer(offs_w, offs_t.to(gl.int64), WEIGHT_ON_M)
    mask = (t_out < M) & (w_out < N)
    if W_LIVE < BLOCK_W:  # the tile's last rows are the next program's
        mask &= w_out < off_w + W_LIVE
    gl.store(c_ptr + t_out * stride_cm + w_out, chain.to(c_ptr.dtype.element_ty), mask=mask)


@gluon.jit
def _gluon_chain_decode_kernel(w_desc, w_grain, x_desc, x_grain, c_ptr, sx_ptr, sw_ptr, M, N, K, stride_cm,
                               stride_sxm, stride_sxk, stride_swn, stride_swk, SCALE_BN: gl.constexpr,
                               STAGES: gl.constexpr, TRIP: gl.constexpr, AHEAD: gl.constexpr, KB_PAD: gl.constexpr,
                               WEIGHT_ON_M: gl.constexpr, BLOCK_W: gl.constexpr, BLOCK_T: gl.constexpr,
                               W_COPIES: gl.constexpr, X_COPIES: gl.constexpr):
    """One program per (weight tile, token tile): one TMA warp, one MMA warpgroup. WEIGHT_ON_M: 64-row weight
    tiles on wgmma's 64-row side, the tokens on its narrow side; else tiles of 64 tokens on the 64-row side and
    narrow weight tiles. BLOCK_W x BLOCK_T: the accumulator's sides (powers of two); of them, the rows a program
    owns (its weight rows, the tokens) land as a box of the descriptor's rows and W_COPIES / X_COPIES boxes of
    GRAIN rows (`_land_rows`). KB_PAD: K blocks, rounded up to a power of two (the scales' shared-memory rows)."""
    w_bufs, x_bufs, ready, empty = _ring(w_desc, x_desc, BLOCK_W, BLOCK_T, STAGES, 1)  # `_issue` orders them
    sw_smem = _scale_rows(KB_PAD, BLOCK_W)
    sx_smem = _scale_rows(KB_PAD, BLOCK_T)
    num_kb = gl.cdiv(K, w_desc.block_type.shape[1])
    W_LIVE: gl.constexpr = w_desc.block_type.shape[0] + W_COPIES * GRAIN
    gl.warp_specialize([
        (_chain_mma_partition, (w_bufs, x_bufs, ready, empty, sw_smem, sx_smem, c_ptr, sx_ptr, sw_ptr, M, N, num_kb,
                                stride_cm, stride_sxm, stride_sxk, stride_swn, stride_swk, SCALE_BN, STAGES, TRIP,
                                AHEAD, WEIGHT_ON_M, W_LIVE)),
        (_chain_load_partition, (w_desc, w_grain, x_desc, x_grain, w_bufs, x_bufs, ready, empty, num_kb, STAGES,
                                 W_COPIES, X_COPIES, W_LIVE)),
    ], [1], [40])


@dataclass(frozen=True)
class ChainConfig:
    """Ring slots (at most; fewer where they do not fit), K blocks per unrolled trip, wgmmas in flight behind the
    promoted one (1 to 3), tokens per program (0: all M in one), programs resident per SM (1, or 2: each at
    most 128 registers a thread and half the SM's shared memory), and weight rows per program (0: 64, on
    wgmma's 64-row side; else 8..64 in steps of 8 on its narrow side, the tokens in one tile of 64 on the other;
    a count that is not a power of two takes a tile of the next one, whose last rows are never stored).
    Numerics-neutral."""

    stages: int = 12
    trip: int = 8
    ahead: int = 3
    token_block: int = 0
    per_sm: int = 1
    weight_rows: int = 0

    def __post_init__(self):
        # A trip issues its own blocks only, and a block in flight holds its slot: with fewer slots than wgmmas
        # in flight the TMA warp and the MMA warpgroup would wait for each other forever.
        if not (1 <= self.ahead <= 3 and self.ahead < self.trip and self.ahead < self.stages):
            raise ValueError(f"ChainConfig: need 1 <= ahead <= 3, ahead < trip and ahead < stages; got {self}")
        if self.per_sm not in (1, 2):
            raise ValueError(f"ChainConfig: per_sm must be 1 or 2; got {self.per_sm}")
        if self.weight_rows and (self.weight_rows % GRAIN.value or not 0 < self.weight_rows <= MAX_NARROW_WEIGHT_ROWS
                                 or self.token_block not in (0, WARPGROUP_ROWS.value)):
            raise ValueError(f"ChainConfig: weight_rows must be a multiple of 8 in 8..64 (wgmma's narrow side; a "
                             f"128-row slot spills, ptxas), with 64-token tiles; got {self}")


def token_tile(m: int) -> int:
    """The token tile: wgmma's narrow side, a power of two from 8 (its least width) to 64."""
    return max(8, triton.next_power_of_2(m))


@functools.cache  # asked on every decode launch
def chain_config(m: int, n: int, k: int, sms: int) -> ChainConfig:
    """The launch for M tokens against an N-row weight on `sms` SMs, from the H200 sweeps of the kernel with its
    scales staged in shared memory (benchmarks/2026-12-04/s22_calls calls 4 and 5: graph replays, GEMM alone,
    x BF16, mean over the six narrow 8B weights):

    - 8 tokens or fewer: 16 ring slots, trips of 16 blocks (1.54x at M = 1, 1.53x at M = 8; 16 slots in trips
      of 8 or 4, and 12 or 20 in trips of 8, within 3%);
    - 16 tokens: 12 slots, trips of 4 (1.47x; 8 slots 1.38x, 12 slots in trips of 8 1.45x);
    - 17 to 32 tokens: one 32-token program per weight tile, 12 slots (1.45x at M = 32; the rule before, two
      16-token programs per tile where they fit in one wave and 8 slots, 1.35x);
    - 33 to 64 tokens, where weight tiles of at most MAX_NARROW_WEIGHT_ROWS rows fit on the SMs in one wave: the
      weight on wgmma's narrow side, the fewest rows a program (a multiple of 8) that do so (32 of 4096 rows, 48
      of the fused qkv's 6144, 8 of 1024), all 64 tokens on the other side, 12 slots, so each weight byte is read
      by one program (twenty-third session, call 4, M = 48 / 64, 32-row tiles: 4096x4096 1.33 -> 1.43 /
      1.24 -> 1.32x, 4096x14336 1.38 -> 1.45 / 1.50 -> 1.61x, 4096x12288 1.40 -> 1.46 / 1.46 -> 1.59x, against
      two 32-token programs per 64-row tile, the second reading it from L2; twenty-sixth session, s26_calls
      call A, tiles landed in pieces: 6144x4096 1.40 -> 1.42 / 1.37 -> 1.41x and 1024x4096 1.16 -> 1.21 /
      1.09 -> 1.14x against the 64-token program below). Otherwise one 64-token program, 10 slots, 2 wgmmas in
      flight (a second wave of split programs: 1.02x);
    - at any token count, the same narrow tiles where 64-row ones would leave three quarters of the SMs idle (the
      standalone k/v's 1024 rows: 16 programs; fitted, 128 of 8 rows): 1024x4096 at M = 1 / 8 / 16 / 24 / 32,
      the whole linear 1.06 / 1.05 / 1.03 / 1.01 / 1.01x -> 1.11 / 1.10 / 1.11 / 1.10 / 1.13x (H100, forty-second
      session's call 2, `s42_calls/swap_probe.py`; the 4096-row weights level or slower, the fused qkv's 6144
      within 0.03x either way, so they keep the rule above); there one wgmma in flight, not 3 (8-row tiles only:
      the whole linear 0.08-0.16 us faster at M = 1 / 16 / 48 / 64 over two calls, 1.10-1.15x -> 1.11-1.17x;
      32-row tiles level, 48-row ones up to 0.23 us slower; H100, forty-sixth session's calls 2 and 3,
      `s45_calls/config_probe.py`).
    Every other launch keeps 3 wgmmas in flight; the 64-token tile spills with 3 (ptxas, `test_gluon_compile`).

    A program holds 8 warps (the MMA warpgroup, the TMA warp padded to a warpgroup) at up to 255 registers, so
    one fits per SM. Where the programs outnumber the SMs (12288 rows: 192 weight tiles), two per SM on half the
    shared memory each take them in one wave (call 7, 12288x4096: 1.50 / 1.52 / 1.47 / 1.31x -> 1.65 / 1.67 /
    1.59 / 1.48x at M = 1 / 16 / 32 / 64); where one wave holds them, the shorter ring loses (4096x14336 at
    M = 16: 1.64 -> 1.15x). Above 32 tokens those two put 64-row weight tiles on the narrow side, one wgmma in
    flight (twenty-third session, calls 6-7, 12288x4096 at M = 64: GEMM alone 1.52 -> 1.57x, the whole linear
    1.50 -> 1.55x over three alternations; on the fused qkv's 96 tiles, one wave at one an SM, 1.38 -> 1.27x)."""
    block = token_tile(m)
    fitted = triton.cdiv(triton.cdiv(n, sms), GRAIN.value) * GRAIN.value
    sparse = triton.cdiv(n, WARPGROUP_ROWS.value) * 4 <= sms  # 64-row tiles would fill a quarter of the SMs or less
    if (block == 64 or sparse) and fitted <= MAX_NARROW_WEIGHT_ROWS:
        return ChainConfig(stages=12, trip=4, ahead=1 if fitted == GRAIN.value else 3, weight_rows=fitted)
    if block == 8:
        config = ChainConfig(stages=16, trip=16, ahead=3, token_block=8)
    elif block == 64:
        config = ChainConfig(stages=10, trip=4, ahead=2, token_block=64)
    else:
        config = ChainConfig(stages=12, trip=4, ahead=3, token_block=block)
    if block == 64:
        two = ChainConfig(stages=6, trip=4, ahead=1, per_sm=2, weight_rows=WARPGROUP_ROWS.value)
    else:
        two = replace(config, per_sm=2)
    if math.prod(grid(config, m, n)) > sms and ring_slots(two, m, k) > two.ahead:
        return two
    return config


def tiles(config: ChainConfig, m: int) -> tuple[int, int]:
    """A program's weight rows and token tile."""
    if config.weight_rows:
        return config.weight_rows, WARPGROUP_ROWS.value
    return WARPGROUP_ROWS.value, config.token_block or token_tile(m)


def slots(config: ChainConfig, m: int) -> tuple[int, int]:
    """A ring slot's weight rows and token rows: the tiles, each a power of two (wgmma's and a tensor's sides)."""
    block_w, block_t = tiles(config, m)
    return triton.next_power_of_2(block_w), block_t


def live_token_rows(config: ChainConfig, m: int) -> int:
    """The token rows a program's copies land per K block: all M, rounded up to GRAIN (a slot is cut no finer:
    Gluon splits no 128-byte swizzle atom), where one tile holds them; else a whole tile (token tiles are
    multiples of GRAIN)."""
    return min(tiles(config, m)[1], triton.cdiv(m, GRAIN.value) * GRAIN.value)


def pieces(rows: int) -> tuple[int, int]:
    """`rows` (a multiple of GRAIN) as TMA boxes: the largest power of two within it, and the count of GRAIN-row
    boxes after it (`_land_rows`)."""
    head = 1 << (rows.bit_length() - 1)
    return head, (rows - head) // GRAIN.value


def grid(config: ChainConfig, m: int, n: int) -> tuple[int, int]:
    """The launch's programs: (weight tiles, token tiles)."""
    block_w, block_t = tiles(config, m)
    return triton.cdiv(n, block_w), triton.cdiv(m, block_t)


def kb_pad(k: int) -> int:
    """K's blocks rounded up to a power of two: the rows of the scales staged in shared memory (the kernel's
    KB_PAD)."""
    return triton.next_power_of_2(triton.cdiv(k, BLOCK_K))


@functools.cache  # asked on every launch, as chain_config
def ring_slots(config: ChainConfig, m: int, k: int) -> int:
    """The ring slots a launch gets: config.stages, or fewer where they would not fit beside every K block's
    scales (staged in shared memory) in the program's share of the SM's shared memory: 228 KiB over `per_sm`
    programs, less 1 KiB the hardware keeps per program and 1 KiB for the barriers."""
    slot_rows = sum(slots(config, m))  # a slot: a weight tile and a token tile, each a row of scales per K block
    free = SM_SHARED_BYTES // config.per_sm - 2048 - kb_pad(k) * slot_rows * 4
    return min(config.stages, free // (slot_rows * BLOCK_K))


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
    config = config or chain_config(m, n, k, _device(a.device.index or 0).multi_processor_count)
    stages = ring_slots(config, m, k)
    if stages <= config.ahead:
        raise OperandError(f"gluon_chain: K = {k} leaves {stages} ring slots for {config} (the scales of every K "
                           f"block take shared memory); `triton_gemm.chain_decodes` keeps such K off this launch")
    registers = {} if config.per_sm == 1 else {"maxnreg": SM_REGISTERS // (config.per_sm * PROGRAM_THREADS)}
    slot_w, slot_t = slots(config, m)
    w_head, w_copies = pieces(tiles(config, m)[0])
    x_head, x_copies = pieces(live_token_rows(config, m))
    w_desc, x_desc = _descriptor(b, w_head), _descriptor(a, x_head)
    make_context_current(a.device)
    _gluon_chain_decode_kernel[grid(config, m, n)](
        w_desc, _descriptor(b, GRAIN.value) if w_copies else w_desc, x_desc,
        _descriptor(a, GRAIN.value) if x_copies else x_desc, c, a_scale, b_scale, m, n,
        k, c.stride(0), a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1),
        SCALE_BN=b_scale_rows, STAGES=stages, TRIP=config.trip, AHEAD=config.ahead,
        KB_PAD=kb_pad(k), WEIGHT_ON_M=not config.weight_rows, BLOCK_W=slot_w, BLOCK_T=slot_t, W_COPIES=w_copies,
        X_COPIES=x_copies, num_warps=4, **registers, **launch_options(m, a.device),
    )
    return c
