"""The grad output's two FP8 operands in Gluon for Hopper: dy [M, C] -> Q_rows (1x128 groups along C, [M, C], for
dgrad) and Q_tokens^T (128x1 groups along tokens, [C, M_pad], for wgrad), reading dy from memory once, with
`triton_quant.quantize_rows_and_tokens_transposed`'s bytes.

The Triton kernel runs each 128x128 region's row programs and token programs side by side, the second reading dy
from L2: latency-bound on the H200 (Nsight Compute, twenty-first session, the fused qkv's dy 8192x6144: 70.5 us,
DRAM 54.5% of peak, 30% occupancy at 95 registers), and the largest of a training step's quantizers. Here
persistent programs walk 128-token x 128-column tiles, TMA brings each tile into a ring in shared memory, and
each tile is read from there twice, in two layouts: by rows (a warp holds whole 128-column rows, so a row's amax
takes shuffles only) and by columns (`TILE_LAYOUT`: a warp holds whole 128-token columns). Both results leave by
TMA stores, their bytes packed four to a word. On the H200 it reaches 61-74% of a copy's bandwidth against the
Triton kernel's 62-69%, ahead on three of four shapes (BENCHMARKS.md, twenty-sixth session). The same design
for the wgrad re-quantizer ran slower than its Triton kernel (47-60% against 59-68%); `gluon_requant` loads
and stores its tiles directly instead. Loading dy that way too (one tile in `TILE_LAYOUT`, the row amax through
shuffles and shared memory) counted 21.5 SASS an element against this kernel's 22.7, at 149 registers (one
program an SM), so this one stays (ptxas offline, thirtieth session).

The arithmetic is `triton_quant`'s @triton.jit helpers, called as `_quantize_row_groups` and `_tokens_t_program`
call them (`_amax`, `_scale_from_amax`, `_reciprocal`, `_quotient`, and `_fp8_word`'s ``cvt.rn.satfinite``), so
the bytes are the Triton kernel's, -0 and NaN included; rows past M read as zeros (TMA), as the Triton kernel's
masked loads do, so the padding tokens of Q_tokens^T are FP8 zeros there too.

GPU only (Hopper, sm_90, Triton 3.6, as `gluon_gemm`); 128-wide groups both ways, BF16 or FP16 dy (`runs`); the
rest takes the Triton kernel.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.contract import Quantized, rows_buffers, tokens_buffers
from precision_engine.numerics.cuda_context import make_context_current
from precision_engine.numerics.formats import QuantFormat
from precision_engine.numerics.gluon_gemm import _TRITON, GLUON_TRITON, _descriptor, _device
from precision_engine.numerics.gluon_tokens import TILE, fp8_words

STAGES = 2  # dy tiles in flight per program (32 KiB each in BF16)
PER_SM = 2  # programs resident per SM: 2 x 32 KiB in and 2 x 16 KiB out each
WARPS = 8
# A thread: 4 rows x 16 columns (one row in each 32-row band); a warp: 4 whole rows of 128 columns.
ROW_LAYOUT = gl.constexpr(gl.BlockedLayout([1, 16], [4, 8], [WARPS, 1], [1, 0]))
# A thread: 16 tokens x 4 columns; a warp: the 128 tokens of 16 columns; the WARPS warps: 128 columns.
TILE_LAYOUT = gl.constexpr(gl.BlockedLayout([16, 4], [8, 4], [1, WARPS], [1, 0]))
# An FP8 output tile's bytes seen as 32-bit words [128, 32]: the same 128-byte swizzle as its FP8 view.
WORDS_LAYOUT = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2))


@gluon.jit
def _load_tile(x_desc, bufs, ready, t, slot, col_tiles: gl.constexpr):
    """Tile t (token tile t // col_tiles, column tile t % col_tiles) into ring slot `slot` by TMA, arriving on
    its `ready` barrier; past the tensor's edges TMA writes zeros."""
    bar = ready.index(slot)
    mbarrier.expect(bar, x_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(x_desc, [(t // col_tiles) * TILE, (t % col_tiles) * TILE], bar,
                                    bufs.index(slot))


@gluon.jit
def _row_words(y, out_ty: gl.constexpr, MBITS: gl.constexpr, EMIN: gl.constexpr):
    """The quotients y [128 rows, 128 columns] as FP8 words [128 rows, 32], word j of a row holding its columns
    4j .. 4j + 3 (the lowest byte first): `gluon_tokens.fp8_words` on the transposed view, whose first dimension
    a thread holds 16 of in order."""
    return gl.permute(fp8_words(gl.permute(y, (1, 0)), out_ty, MBITS, EMIN), (1, 0))


@gluon.jit
def _gluon_grad_output_kernel(x_desc, qr_desc, qt_desc, sr_ptr, st_ptr, M, C, tiles, COL_TILES: gl.constexpr,
                              FMAX_R: gl.constexpr, RFMAX_R: gl.constexpr, MBITS_R: gl.constexpr,
                              EMIN_R: gl.constexpr, POW2_R: gl.constexpr, FMAX_T: gl.constexpr,
                              RFMAX_T: gl.constexpr, MBITS_T: gl.constexpr, EMIN_T: gl.constexpr,
                              POW2_T: gl.constexpr, STAGES: gl.constexpr):
    """Persistent: program p takes tiles p, p + programs, ..., STAGES - 1 of them in flight ahead of the one it
    computes. A tile's rows are quantized first and leave through `out_r`, then its columns through `out_t`; each
    buffer is written again only after the store out of it a tile before has left it (one buffer each: two
    programs an SM need the shared memory)."""
    bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES, TILE, TILE], x_desc.layout)
    out_r = gl.allocate_shared_memory(qr_desc.dtype, [TILE, TILE], qr_desc.layout)
    out_t = gl.allocate_shared_memory(qt_desc.dtype, [TILE, TILE], qt_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    first = gl.program_id(0)
    step = gl.num_programs(0)
    count = gl.cdiv(tiles - first, step)
    for j in gl.static_range(STAGES - 1):
        if j < count:
            _load_tile(x_desc, bufs, ready, first + j * step, j, COL_TILES)
    for i in range(count):
        t = first + i * step
        gl.thread_barrier()  # every warp is done with slot (i - 1) % STAGES, refilled here
        if i + STAGES - 1 < count:
            _load_tile(x_desc, bufs, ready, t + (STAGES - 1) * step, (i + STAGES - 1) % STAGES, COL_TILES)
        tok0 = (t // COL_TILES) * TILE
        col0 = (t % COL_TILES) * TILE
        slot = bufs.index(i % STAGES)
        mbarrier.wait(ready.index(i % STAGES), (i // STAGES) & 1)
        # dgrad's operand: 1x128 groups along C, one per row of the tile
        x = slot.load(ROW_LAYOUT).to(gl.float32)
        scale = T._scale_from_amax(T._amax(gl.abs(x), 1), FMAX_R, RFMAX_R, POW2_R)
        y = T._quotient(x, scale[:, None], T._reciprocal(scale, POW2_R)[:, None], POW2_R, False)
        words = _row_words(y, qr_desc.dtype, MBITS_R, EMIN_R)
        tma.store_wait(1)  # of the two stores a tile ago, the rows' (issued first) has left out_r
        out_r._reinterpret(gl.uint32, [TILE, TILE // 4], WORDS_LAYOUT).store(words)
        fence_async_shared()
        gl.thread_barrier()  # every warp's words are in out_r before the one store
        tma.async_copy_shared_to_global(qr_desc, [tok0, col0], out_r)
        rows = tok0 + gl.arange(0, TILE, layout=gl.SliceLayout(1, ROW_LAYOUT))
        gl.store(sr_ptr + (col0 // TILE) * M + rows, scale, mask=rows < M)
        # wgrad's operand: 128x1 groups along tokens, one per column, stored transposed
        x = slot.load(TILE_LAYOUT).to(gl.float32)
        scale = T._scale_from_amax(T._amax(gl.abs(x), 0), FMAX_T, RFMAX_T, POW2_T)
        y = T._quotient(x, scale[None, :], T._reciprocal(scale, POW2_T)[None, :], POW2_T, False)
        words = fp8_words(y, qt_desc.dtype, MBITS_T, EMIN_T)
        tma.store_wait(1)  # the columns' store a tile ago has left out_t (the rows' just issued may not have)
        out_t._reinterpret(gl.uint32, [TILE, TILE // 4], WORDS_LAYOUT).store(gl.permute(words, (1, 0)))
        fence_async_shared()
        gl.thread_barrier()
        tma.async_copy_shared_to_global(qt_desc, [col0, tok0], out_t)
        cols = col0 + gl.arange(0, TILE, layout=gl.SliceLayout(0, TILE_LAYOUT))
        gl.store(st_ptr + (tok0 // TILE) * C + cols, scale, mask=cols < C)
    tma.store_wait(0)


def runs(x: torch.Tensor, rows_fmt: QuantFormat, tokens_fmt: QuantFormat) -> bool:
    """Whether this kernel takes dy: Triton 3.6 on Hopper, 128-wide groups both ways, BF16 or FP16 dy [M, C]
    row-major with TMA-legal rows, and C a multiple of 16 (Q_rows' FP8 rows, C bytes each, are TMA-legal)."""
    return (_TRITON == GLUON_TRITON and x.is_cuda and _device(x.device.index or 0).major == 9
            and rows_fmt.group == TILE.value and tokens_fmt.group == TILE.value
            and x.dtype in (torch.bfloat16, torch.float16) and x.dim() == 2 and x.shape[1] % 16 == 0
            and x.stride(1) == 1 and x.stride(0) * x.element_size() % 16 == 0 and x.stride(0) >= x.shape[1]
            and x.data_ptr() % 16 == 0)


def quantize_rows_and_tokens_transposed(x: torch.Tensor, rows_fmt: QuantFormat, tokens_fmt: QuantFormat
                                        ) -> tuple[Quantized, Quantized]:
    """`triton_quant.quantize_rows_and_tokens_transposed(x, rows_fmt, tokens_fmt)`'s bytes, for dy `runs`
    takes."""
    m, c = x.shape
    rows_out, tokens_out = rows_buffers(m, c, rows_fmt, x.device), tokens_buffers(m, c, tokens_fmt, x.device)
    q_t, scale_t = tokens_out.data, tokens_out.scale.t()  # the kernel writes scales [M_pad/G, C] row-major
    if m == 0 or c == 0:
        return rows_out, tokens_out
    col_tiles = triton.cdiv(c, TILE.value)
    tiles = q_t.shape[1] // TILE.value * col_tiles
    programs = min(tiles, PER_SM * _device(x.device.index or 0).multi_processor_count)
    r, t = T._fmt_args(rows_fmt, False), T._fmt_args(tokens_fmt, False)
    make_context_current(x.device)
    _gluon_grad_output_kernel[(programs,)](
        _descriptor(x, TILE.value, TILE.value), _descriptor(rows_out.data, TILE.value, TILE.value),
        _descriptor(q_t, TILE.value, TILE.value), rows_out.scale, scale_t, m, c, tiles, COL_TILES=col_tiles,
        FMAX_R=r["FMAX"], RFMAX_R=r["RFMAX"], MBITS_R=r["MBITS"], EMIN_R=r["EMIN"], POW2_R=r["POW2"],
        FMAX_T=t["FMAX"], RFMAX_T=t["RFMAX"], MBITS_T=t["MBITS"], EMIN_T=t["EMIN"], POW2_T=t["POW2"],
        STAGES=STAGES, num_warps=WARPS, enable_fp_fusion=False)
    return rows_out, tokens_out
