"""The wgrad re-quantizer in Gluon for Hopper: a saved 1x128 FP8 activation x [M, C] -> x^T in 128x1 groups along
tokens, [C, M_pad], with `triton_quant.requantize_tokens_transposed`'s bytes.

The Triton kernel loads its tile with plain loads and computes on it, one tile per program: latency-bound on the
H200 (Nsight Compute, twenty-first session: 29% occupancy at 95 registers, DRAM 41% busy; 59-68% of a copy's
bandwidth against issue 12's 80%), and a persistent Triton version that prefetched its next tile in registers
ran slower still (twenty-third session: 30-49%, at 136 registers). Here TMA moves the bytes: persistent
programs walk 128-token x 128-column tiles with STAGES tiles in flight through a shared-memory ring, and each
tile goes back transposed from shared memory by a TMA store while the next is computed. A thread holds 16
tokens x 4 columns: it reads its rows as 4-byte words, writes its transposed rows as 16-byte ones, and a
column's 128 tokens lie in one warp, so its amax takes shuffles only.

The arithmetic is `triton_quant`'s @triton.jit helpers, called as they are: the input scale's multiply (no
contraction: launched without FP fusion), `_amax`, `_scale_from_amax`, `_reciprocal`, `_quotient`, and the
FP8 cast the Triton kernel's `_fp8_word` issues (``cvt.rn.satfinite``). So the bytes are the Triton kernel's,
-0 and NaN included.

GPU only (Hopper, sm_90, Triton 3.6, as `gluon_gemm`); 128-token output groups from 128-column input groups
(the Jet-RL formats); `runs` sends anything else to the Triton kernel.
"""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.contract import Quantized, tokens_buffers
from precision_engine.numerics.formats import QuantFormat
from precision_engine.numerics.gluon_gemm import _FP8_GL, _TRITON, GLUON_TRITON, _descriptor, _device

TILE = gl.constexpr(128)  # tokens (one output group) and columns (one input group) per tile
STAGES = 3  # input tiles in flight per program
PER_SM = 2  # programs resident per SM: 3 x 16 KiB in and 2 x 16 KiB out each
WARPS = 8
# A thread: 16 tokens x 4 columns; a warp: the 128 tokens of 16 columns; the WARPS warps: 128 columns.
TILE_LAYOUT = gl.constexpr(gl.BlockedLayout([16, 4], [8, 4], [1, WARPS], [1, 0]))
# The output tile's bytes seen as 32-bit words [128 columns, 32]: the same 128-byte swizzle as its FP8 view.
WORDS_LAYOUT = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2))


@gluon.jit
def _fp8_words(y, out_ty: gl.constexpr, MBITS: gl.constexpr, EMIN: gl.constexpr):
    """The quotients y [128 tokens, columns] as FP8 words [32, columns], word j holding tokens 4j .. 4j + 3 (the
    lowest byte first): each thread's 16 consecutive tokens split into fours in registers, then packed as
    `triton_quant._fp8_word` packs them (two ``cvt.rn.satfinite.*x2.f32``, a move), where a plain cast
    packed two values at a time and then moved bytes one by one (about one PRMT and a LOP3 a value, ptxas)."""
    quads = gl.reshape(gl.permute(gl.reshape(y, [TILE // 4, 4, TILE]), (0, 2, 1)), [TILE // 4, TILE, 2, 2])
    even, odd = gl.split(quads)  # tokens 4j + {0, 2}, 4j + {1, 3}
    y0, y2 = gl.split(even)
    y1, y3 = gl.split(odd)
    return T._fp8_word(y0, y1, y2, y3, out_ty, MBITS, EMIN, False, True)


@gluon.jit
def _load_tile(x_desc, bufs, ready, t, slot, col_tiles: gl.constexpr):
    """Tile t (token tile t // col_tiles, column tile t % col_tiles) into ring slot `slot` by TMA, arriving on
    its `ready` barrier; past the tensor's edges TMA writes zeros."""
    bar = ready.index(slot)
    mbarrier.expect(bar, x_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(x_desc, [(t // col_tiles) * TILE, (t % col_tiles) * TILE], bar,
                                    bufs.index(slot))


@gluon.jit
def _input_scales(s_ptr, t, col_tiles: gl.constexpr, M, stride_sg):
    """Tile t's input scales, one per token (the tile lies in one input group), as its rows' vector; 0 past M,
    where the data is 0 too."""
    toks = (t // col_tiles) * TILE + gl.arange(0, TILE, layout=gl.SliceLayout(1, TILE_LAYOUT))
    return gl.load(s_ptr + (t % col_tiles) * stride_sg + toks, mask=toks < M, other=0.0)


@gluon.jit
def _gluon_requant_kernel(x_desc, q_desc, s_in_ptr, s_out_ptr, M, C, stride_sg, tiles, COL_TILES: gl.constexpr,
                          FMAX: gl.constexpr, RFMAX: gl.constexpr, MBITS: gl.constexpr, EMIN: gl.constexpr,
                          POW2: gl.constexpr, STAGES: gl.constexpr):
    """Persistent: program p takes tiles p, p + programs, ... Each iteration refills the slot the last one read
    (after a barrier: every warp has its tile in registers), waits for its own tile, and stores the result
    through one of two output buffers, the other's TMA store still in flight. The input scales of the next tile
    are loaded a tile ahead. COL_TILES (C's 128-column tiles) is a constant, so a tile's coordinates cost a
    multiply and a shift, not an integer division (ptxas: 921 -> 854 SASS instructions a loop trip)."""
    layout: gl.constexpr = TILE_LAYOUT
    bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES, TILE, TILE], x_desc.layout)
    outs = gl.allocate_shared_memory(q_desc.dtype, [2, TILE, TILE], q_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    first = gl.program_id(0)
    step = gl.num_programs(0)
    count = gl.cdiv(tiles - first, step)
    for j in gl.static_range(STAGES - 1):
        if j < count:
            _load_tile(x_desc, bufs, ready, first + j * step, j, COL_TILES)
    s_next = _input_scales(s_in_ptr, first, COL_TILES, M, stride_sg)
    for i in range(count):
        t = first + i * step
        gl.thread_barrier()  # every warp is done with slot (i - 1) % STAGES, refilled here
        if i + STAGES - 1 < count:
            _load_tile(x_desc, bufs, ready, t + (STAGES - 1) * step, (i + STAGES - 1) % STAGES, COL_TILES)
        s_in = s_next
        s_next = _input_scales(s_in_ptr, gl.minimum(t + step, tiles - 1), COL_TILES, M, stride_sg)
        mbarrier.wait(ready.index(i % STAGES), (i // STAGES) & 1)
        x = bufs.index(i % STAGES).load(layout).to(gl.float32) * s_in[:, None]
        scale = T._scale_from_amax(T._amax(gl.abs(x), 0), FMAX, RFMAX, POW2)
        y = T._quotient(x, scale[None, :], T._reciprocal(scale, POW2)[None, :], POW2, False)
        words = _fp8_words(y, q_desc.dtype, MBITS, EMIN)
        out = outs.index(i % 2)
        tma.store_wait(1)  # the store out of this buffer two tiles ago has left it
        out._reinterpret(gl.uint32, [TILE, TILE // 4], WORDS_LAYOUT).store(gl.permute(words, (1, 0)))
        fence_async_shared()
        tok0 = (t // COL_TILES) * TILE
        col0 = (t % COL_TILES) * TILE
        tma.async_copy_shared_to_global(q_desc, [col0, tok0], out)
        cols = col0 + gl.arange(0, TILE, layout=gl.SliceLayout(0, layout))
        gl.store(s_out_ptr + (tok0 // TILE) * C + cols, scale, mask=cols < C)
    tma.store_wait(0)


def runs(q_in: Quantized, fmt: QuantFormat) -> bool:
    """Whether this kernel takes the re-quantization: Triton 3.6 on Hopper, 128-column input groups with M-major
    scales, 128-token output groups, row-major FP8 data with TMA-legal rows."""
    x = q_in.data
    return (_TRITON == GLUON_TRITON and x.is_cuda and _device(x.device.index or 0).major == 9
            and q_in.fmt.group == TILE.value and fmt.group == TILE.value and x.dtype in _FP8_GL and x.dim() == 2
            and x.stride(1) == 1 and x.stride(0) % 16 == 0 and x.data_ptr() % 16 == 0
            and q_in.scale.stride(0) == 1)


def requantize_tokens_transposed(q_in: Quantized, fmt: QuantFormat) -> Quantized:
    """`triton_quant.requantize_tokens_transposed(q_in, fmt)`'s bytes, for operands `runs` takes."""
    x = q_in.data
    m, c = x.shape
    out = tokens_buffers(m, c, fmt, x.device)
    q, scale = out.data, out.scale.t()  # the kernel writes scales [M_pad/G, C] row-major
    if q.numel() == 0:
        return out
    col_tiles = triton.cdiv(c, TILE.value)
    tiles = q.shape[1] // TILE.value * col_tiles
    programs = min(tiles, PER_SM * _device(x.device.index or 0).multi_processor_count)
    args = T._fmt_args(fmt, False)
    _gluon_requant_kernel[(programs,)](
        _descriptor(x, TILE.value, TILE.value), _descriptor(q, TILE.value, TILE.value), q_in.scale, scale, m, c,
        q_in.scale.stride(1), tiles, COL_TILES=col_tiles, FMAX=args["FMAX"], RFMAX=args["RFMAX"],
        MBITS=args["MBITS"], EMIN=args["EMIN"], POW2=args["POW2"], STAGES=STAGES, num_warps=WARPS,
        enable_fp_fusion=False)
    return out
