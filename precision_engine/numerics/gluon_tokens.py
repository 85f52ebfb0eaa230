"""Quantizing a tile held in registers along tokens, written transposed, in Gluon for Hopper: what the wgrad
re-quantizer (`gluon_requant`) and the grad-output quantizer (`gluon_grad_output`) share.

Triton infers a tile's layout from its loads and stores, and for a tokens-transposed output the two disagree: a
thread loads 4 columns of scattered tokens and stores runs of tokens, so Triton transposes through shared memory
between them (about 1.1 SASS instructions an element), and every thread then computes the scale and reciprocal
of each column it holds. Here the layout is chosen (`tile_layout`): a thread holds 16 consecutive tokens x 4
columns, so it loads words along rows and stores its columns' FP8 bytes as 16-byte words along tokens with no
shared memory between; a column's 128 tokens lie in the lanes of one warp (or two, with 4 lanes along tokens),
so its amax takes shuffles; and each column's scale and reciprocal are computed once in its group of lanes and
handed to the others (`_column_layout`).

The arithmetic is `triton_quant`'s @triton.jit helpers, called as its Triton kernels call them (`_amax`,
`_scale_from_amax`, `_reciprocal`, `_quotient`, and `_fp8_word`'s ``cvt.rn.satfinite``), so the bytes are
theirs, -0 and NaN included.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from precision_engine.numerics import triton_quant as T

TILE = gl.constexpr(128)  # tokens a program (one output group)


@gluon.constexpr_function
def block_columns(warps, token_lanes):
    """A program's columns: the warps not needed to cover 128 tokens lie along columns."""
    return 4 * (32 // token_lanes) * (warps * 16 * token_lanes // 128)


@gluon.constexpr_function
def tile_layout(warps, token_lanes):
    """[128 tokens, block_columns]: a thread holds 16 consecutive tokens x 4 columns, token_lanes (4 or 8) of a
    warp's lanes along tokens and the rest along columns, warps along tokens until they cover 128, then along
    columns."""
    warps_t = 128 // (16 * token_lanes)
    return gl.BlockedLayout([16, 4], [token_lanes, 32 // token_lanes], [warps_t, warps // warps_t], [1, 0])


@gluon.constexpr_function
def _lane_bits(warps, token_lanes):
    """How `tile_layout` spreads a program: (lanes along columns, then the log2 of lanes along columns, lanes
    along tokens, warps along columns and warps along tokens), from which its words' and columns' layouts are
    built."""
    col_lanes, warps_t = 32 // token_lanes, 128 // (16 * token_lanes)
    return col_lanes, *(n.bit_length() - 1 for n in (col_lanes, token_lanes, warps // warps_t, warps_t))


@gluon.constexpr_function
def _words_layout(warps, token_lanes):
    """The tile's FP8 words [32, block_columns] (word j: tokens 4j .. 4j + 3) where `fp8_words` leaves them,
    threads as in `tile_layout`: a thread's 4 consecutive words of a column in consecutive registers (one
    16-byte store along tokens). Linear-layout bases: each doubles a register, lane or warp index."""
    col_lanes, log_c, log_t, log_wc, log_wt = _lane_bits(warps, token_lanes)
    lanes = [[0, 4 << i] for i in range(log_c)] + [[4 << i, 0] for i in range(log_t)]
    warp_list = [[0, 4 * col_lanes << i] for i in range(log_wc)] + [[4 * token_lanes << i, 0] for i in range(log_wt)]
    return gl.DistributedLinearLayout([[1, 0], [2, 0], [0, 1], [0, 2]], lanes, warp_list, [],
                                      [32, block_columns(warps, token_lanes)])


@gluon.constexpr_function
def _column_layout(warps, token_lanes):
    """The tile's columns, one a lane: lane (column lane c, token lane j) holds column 4c + j % 4 of its warp's, so
    each of the 4 columns a thread of `tile_layout` holds is computed once in its group of token lanes (again in
    the groups above the first 4, and in warps along tokens)."""
    col_lanes, log_c, log_t, log_wc, log_wt = _lane_bits(warps, token_lanes)
    lanes = [[4 << i] for i in range(log_c)] + [[1], [2]] + [[0]] * (log_t - 2)
    warp_list = [[4 * col_lanes << i] for i in range(log_wc)] + [[0]] * log_wt
    return gl.DistributedLinearLayout([], lanes, warp_list, [], [block_columns(warps, token_lanes)])


@gluon.jit
def fp8_words(y, out_ty: gl.constexpr, MBITS: gl.constexpr, EMIN: gl.constexpr):
    """The quotients y [128 tokens, columns] as FP8 words [32, columns], word j holding tokens 4j .. 4j + 3 (the
    lowest byte first): each thread's 16 consecutive tokens split into fours in registers, then packed as
    `triton_quant._fp8_word` packs them (two ``cvt.rn.satfinite.*x2.f32``, a move), where a plain cast
    packed two values at a time and then moved bytes one by one (about one PRMT and a LOP3 a value, ptxas)."""
    cols: gl.constexpr = y.shape[1]
    quads = gl.reshape(gl.permute(gl.reshape(y, [TILE // 4, 4, cols]), (0, 2, 1)), [TILE // 4, cols, 2, 2])
    even, odd = gl.split(quads)  # tokens 4j + {0, 2}, 4j + {1, 3}
    y0, y2 = gl.split(even)
    y1, y3 = gl.split(odd)
    return T._fp8_word(y0, y1, y2, y3, out_ty, MBITS, EMIN, False, True)


@gluon.jit
def quantize_tokens_transposed(x, q_ptr, s_ptr, tok0, col0, C, M_pad, WARPS: gl.constexpr,
                               TOKEN_LANES: gl.constexpr, EVEN_C: gl.constexpr, FMAX: gl.constexpr,
                               RFMAX: gl.constexpr, MBITS: gl.constexpr, EMIN: gl.constexpr, POW2: gl.constexpr,
                               BLOCK_SCALE: gl.constexpr):
    """x [128 tokens from tok0, block_columns from col0] in fp32 and `tile_layout` -> its 128x1 groups: FP8 bytes
    into q [C, M_pad] (x^T) and scales into [M_pad / 128, C] row-major at s_ptr. BLOCK_SCALE: the tile is one block
    of x^T instead (one scale from its amax), the scale stored at [C / block_columns, M_pad / 128] row-major."""
    layout: gl.constexpr = tile_layout(WARPS, TOKEN_LANES)
    block_c: gl.constexpr = block_columns(WARPS, TOKEN_LANES)
    if BLOCK_SCALE:
        scale = T._scale_from_amax(T._amax(T._amax(gl.abs(x), 0), 0), FMAX, RFMAX, POW2)
        y = T._quotient(x, scale, T._reciprocal(scale, POW2), POW2, False)
    else:
        amax = gl.convert_layout(T._amax(gl.abs(x), 0), _column_layout(WARPS, TOKEN_LANES))
        scale = T._scale_from_amax(amax, FMAX, RFMAX, POW2)
        inv = gl.convert_layout(T._reciprocal(scale, POW2), gl.SliceLayout(0, layout))
        scale = gl.convert_layout(scale, gl.SliceLayout(0, layout))
        y = T._quotient(x, scale[None, :], inv[None, :], POW2, False)
    words_layout: gl.constexpr = _words_layout(WARPS, TOKEN_LANES)
    words = gl.convert_layout(fp8_words(y, q_ptr.dtype.element_ty, MBITS, EMIN), words_layout)
    j = gl.arange(0, TILE // 4, layout=gl.SliceLayout(1, words_layout))
    c = gl.arange(0, block_c, layout=gl.SliceLayout(0, words_layout))
    pitch = M_pad // 4
    q_at = (q_ptr.to(gl.pointer_type(gl.uint32)) + col0.to(gl.int64) * pitch + tok0 // 4
            + (c[None, :] * pitch + j[:, None]))
    if EVEN_C:
        gl.store(q_at, words)
    else:
        gl.store(q_at, words, mask=(col0 + c < C)[None, :])
    if BLOCK_SCALE:
        gl.store(s_ptr + (col0 // block_c) * (M_pad // TILE) + tok0 // TILE, scale)
    else:
        cols = gl.arange(0, block_c, layout=gl.SliceLayout(0, layout))
        s_at = s_ptr + (tok0 // TILE) * C + col0 + cols
        if EVEN_C:
            gl.store(s_at, scale)
        else:
            gl.store(s_at, scale, mask=col0 + cols < C)
