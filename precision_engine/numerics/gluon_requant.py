"""The wgrad re-quantizer in Gluon for Hopper: a saved 1x128 FP8 activation x [M, C] -> x^T in 128x1 groups along
tokens, [C, M_pad], with `triton_quant.requantize_tokens_transposed`'s bytes, in fewer instructions.

The Triton kernel is bound by issuing instructions: with fp32 scales its SASS an element (15.1, 13.1 since
`triton_quant._quotient` stops after one correction) take 0.96 (0.83) of a copy's time to issue on the H200
(`scripts/sass_per_element.py`); at 15.1 it ran at 59-68% of a copy's bandwidth against issue 12's 80%. About
6 of them are not arithmetic, mostly a transpose through shared memory and per-thread scales that
`gluon_tokens` avoids by choosing the tile's layout. Here a program loads its 128 tokens x 128 columns (8 warps,
one whole input group) as 4-byte words along rows (the row stride is a constant, so all 16 loads of a thread share
one address), dequantizes in registers and hands the tile to `gluon_tokens.quantize_tokens_transposed`. ptxas
(Triton 3.6, sm_90a): 9.7 SASS an element at 80 registers, issue / copy 0.62. Every program shape issues the
same; the 8-warp one keeps the most loads in flight: 77-90% of a copy's bandwidth on an H100 at 8192-16384 x
4096-14336, against 72-83% for the Triton kernel and 73-83% for 2-warp programs (BENCHMARKS.md, thirty-second
session), 91-93% of a copy of the same bytes on every shape. Tried and dropped: two token groups a program, both
tiles' loads out before the first is quantized (9.3 SASS an element, but 127 registers, two 8-warp programs an SM:
with fp32 scales 67-87% of copy against 77-90% on an H100, thirty-fourth session; the patch is in
`benchmarks/2026-12-05/s34_calls/`); a TMA-fed persistent version, which moved both tiles through shared memory
(14.2 SASS an element, slower than the Triton kernel, twenty-sixth session); a persistent loop prefetching the next
tile into registers (198 registers a thread, thirty-third session).

The input scale's multiply is the Triton kernel's (one fp32 multiply, no contraction: launched without FP
fusion), the rest `gluon_tokens`', so the bytes are the Triton kernel's, -0 and NaN included; tokens past M load
as zeros, so the padding tokens are FP8 zeros.

With BLOCK_SCALE the same program writes x^T in 128x128 blocks instead (a policy's `wgrad_input` in blocks,
`triton_quant.requantize_blocks_transposed`'s bytes): its 8 warps hold one whole block, which takes one scale from
the tile's amax. ptxas: 9.9 SASS an element at 80 registers (the Triton kernel: 255 registers at its fastest, 2
warps); on an H100, 76.0-88.5% of copy bandwidth against the Triton kernel's 62.4-82.9% in the same run (8 token
lanes; 4 ran 72.9-85.6%; BENCHMARKS.md, thirty-eighth session).

On the H200 one tile a program runs at 59-73% of copy bandwidth (75-77% of a copy of its own bytes) where the H100
reaches 91-93%: registers bound the loads in flight (a tile a program, three programs an SM), and the H200's
bandwidth needs more bytes in flight. So AUTO runs `_ring_kernel` in both layouts, wherever cp.async can copy the
rows (`ring_copies`): persistent programs, two an SM, each keeping the next RING_STAGES - 1 tiles in flight by
``cp.async`` into shared memory while it quantizes the one before, the output stored as above. H200, in turns
with one tile a program (fifty-first session, tokens layout, as a probe whose SASS is this kernel's to the
instruction): 65.3 / 79.8 / 81.1 / 82.5% of copy against 59.7 / 66.9 / 72.0 / 73.1% on 8192x4096 / 16384x4096 /
8192x14336 / 16384x14336. On an H100 the ring's lead depends on the kernel before it: behind a copy of its bytes
or behind itself it trails one tile a program (by up to 4 and 12 points of copy); behind the dgrad GEMM, which
precedes it in a linear's backward, it leads in both layouts: behind a BF16 dgrad 88.6-93.5% of copy against
81.3-92.3%, ahead on 37 of 40 rows over five runs; behind the FP8 one AUTO runs ahead on 6 of 8, 2.2 and 0.1 points
behind at 8192x14336 (fifty-fourth session, BENCHMARKS.md). The blocks layout's ring is untimed on an H200.

GPU only (Hopper, sm_90, Triton 3.6, as `gluon_gemm`); 128-token output groups from input groups that are whole
multiples of the program's columns; `runs` and `runs_blocks` send anything else to the Triton kernels.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from precision_engine.errors import OperandError
from precision_engine.numerics import gluon_tokens as G
from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.contract import Quantized, blocks_t_buffers, tokens_buffers
from precision_engine.numerics.formats import QuantFormat, ScaleKind
from precision_engine.numerics.gluon_gemm import _FP8_GL, _TRITON, GLUON_TRITON, _device
from precision_engine.numerics.gluon_tokens import TILE

WARPS = 8
TOKEN_LANES = 8  # a program: 8 warps, 128 columns, one whole input group (`gluon_tokens.tile_layout`)
RING_STAGES = 3  # a ring program's tiles in shared memory: two in flight while it quantizes one
RING_WARPS_PER_SM = 16  # two 8-warp ring programs an SM (ptxas: 125 registers a thread)


@gluon.jit
def _requant_kernel(x_ptr, s_in_ptr, q_ptr, s_ptr, M, C, M_pad, stride_sig, STRIDE: gl.constexpr,
                    G_IN: gl.constexpr, WARPS: gl.constexpr, TOKEN_LANES: gl.constexpr, EVEN_M: gl.constexpr,
                    EVEN_C: gl.constexpr, FMAX: gl.constexpr, RFMAX: gl.constexpr, MBITS: gl.constexpr,
                    EMIN: gl.constexpr, POW2: gl.constexpr, BLOCK_SCALE: gl.constexpr):
    """Program (token group, `gluon_tokens.block_columns` columns): x [M, C] (row stride STRIDE) with M-major
    input scales s_in [M, C / G_IN] (strides (1, stride_sig)) -> q [C, M_pad] and scales [M_pad / 128, C]
    row-major; with BLOCK_SCALE, scales [C / 128, M_pad / 128] row-major, one a program."""
    _requant_tile(x_ptr, s_in_ptr, q_ptr, s_ptr, gl.program_id(0) * TILE,
                  gl.program_id(1) * G.block_columns(WARPS, TOKEN_LANES), M, C, M_pad, stride_sig, STRIDE, G_IN,
                  WARPS, TOKEN_LANES, EVEN_M, EVEN_C, FMAX, RFMAX, MBITS, EMIN, POW2, BLOCK_SCALE)


@gluon.jit
def _requant_tile(x_ptr, s_in_ptr, q_ptr, s_ptr, tok0, col0, M, C, M_pad, stride_sig, STRIDE: gl.constexpr,
                  G_IN: gl.constexpr, WARPS: gl.constexpr, TOKEN_LANES: gl.constexpr, EVEN_M: gl.constexpr,
                  EVEN_C: gl.constexpr, FMAX: gl.constexpr, RFMAX: gl.constexpr, MBITS: gl.constexpr,
                  EMIN: gl.constexpr, POW2: gl.constexpr, BLOCK_SCALE: gl.constexpr):
    """One program's tile, from token tok0 and column col0: loaded from global memory into registers,
    dequantized and handed to `gluon_tokens.quantize_tokens_transposed`."""
    layout: gl.constexpr = G.tile_layout(WARPS, TOKEN_LANES)
    block_c: gl.constexpr = G.block_columns(WARPS, TOKEN_LANES)
    toks = gl.arange(0, TILE, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, block_c, layout=gl.SliceLayout(0, layout))
    x_at = x_ptr + tok0.to(gl.int64) * STRIDE + col0 + (toks[:, None] * STRIDE + cols[None, :])
    s_at = s_in_ptr + (col0 // G_IN).to(gl.int64) * stride_sig + tok0 + toks  # one input group: a scale a token
    if EVEN_M and EVEN_C:
        x = gl.load(x_at)
    else:
        x = gl.load(x_at, mask=(tok0 + toks < M)[:, None] & (col0 + cols < C)[None, :], other=0.0)
    if EVEN_M:
        s_in = gl.load(s_at)
    else:
        s_in = gl.load(s_at, mask=tok0 + toks < M, other=1.0)
    G.quantize_tokens_transposed(x.to(gl.float32) * s_in[:, None], q_ptr, s_ptr, tok0, col0, C, M_pad, WARPS,
                                 TOKEN_LANES, EVEN_C, FMAX, RFMAX, MBITS, EMIN, POW2, BLOCK_SCALE)


@gluon.jit
def _issue_tile(x_ring, s_ring, slot, tile, x_ptr, s_in_ptr, M, C, n_tiles, n_tok, stride_sig, STRIDE: gl.constexpr,
                G_IN: gl.constexpr, BLOCK_C: gl.constexpr, WARPS: gl.constexpr, EVEN_M: gl.constexpr,
                EVEN_C: gl.constexpr):
    """cp.async tile `tile`'s FP8 bytes and input scales into ring slot `slot` (nothing past the last tile) and
    commit them as one group; tokens and columns past the operand fill with zeros."""
    copy_layout: gl.constexpr = gl.BlockedLayout([1, 16], [32 // (BLOCK_C // 16), BLOCK_C // 16], [WARPS, 1],
                                                 [1, 0])
    scale_layout: gl.constexpr = gl.BlockedLayout([4], [32], [WARPS], [0])
    tok0 = (tile % n_tok) * TILE
    col0 = (tile // n_tok) * BLOCK_C
    toks = gl.arange(0, TILE, layout=gl.SliceLayout(1, copy_layout))
    cols = gl.arange(0, BLOCK_C, layout=gl.SliceLayout(0, copy_layout))
    x_at = x_ptr + tok0.to(gl.int64) * STRIDE + col0 + (toks[:, None] * STRIDE + cols[None, :])
    s_toks = gl.arange(0, TILE, layout=scale_layout)
    s_at = s_in_ptr + (col0 // G_IN).to(gl.int64) * stride_sig + tok0 + s_toks
    live = tile < n_tiles
    x_ok = gl.full([TILE, BLOCK_C], 1, gl.int1, copy_layout) & live
    s_ok = gl.full([TILE], 1, gl.int1, scale_layout) & live
    if not EVEN_M:
        x_ok = x_ok & (tok0 + toks < M)[:, None]
        s_ok = s_ok & (tok0 + s_toks < M)
    if not EVEN_C:
        x_ok = x_ok & (col0 + cols < C)[None, :]
    cp.async_copy_global_to_shared(x_ring.index(slot), x_at, mask=x_ok)
    cp.async_copy_global_to_shared(s_ring.index(slot), s_at, mask=s_ok)
    cp.commit_group()


@gluon.jit
def _ring_kernel(x_ptr, s_in_ptr, q_ptr, s_ptr, M, C, M_pad, stride_sig, n_tiles, n_tok, STRIDE: gl.constexpr,
                 G_IN: gl.constexpr, WARPS: gl.constexpr, TOKEN_LANES: gl.constexpr, STAGES: gl.constexpr,
                 EVEN_M: gl.constexpr, EVEN_C: gl.constexpr, FMAX: gl.constexpr, RFMAX: gl.constexpr,
                 MBITS: gl.constexpr, EMIN: gl.constexpr, POW2: gl.constexpr, BLOCK_SCALE: gl.constexpr):
    """Persistent: program p quantizes tiles p, p + P, ... (tile t: token group t % n_tok, column block
    t // n_tok) as `_requant_kernel` quantizes its one, the next STAGES - 1 tiles in flight meanwhile. The tile in
    shared memory is swizzled in 16-byte chunks (chunk ^= (token // 16) % 8), so the tile layout's 4-byte reads (a
    warp: 8 token lanes 16 tokens apart x 4 column lanes) fall in 8 distinct chunks and the copies' 16-byte writes
    (a warp: 4 whole rows) stay conflict-free."""
    layout: gl.constexpr = G.tile_layout(WARPS, TOKEN_LANES)
    block_c: gl.constexpr = G.block_columns(WARPS, TOKEN_LANES)
    x_ring = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [STAGES, TILE, block_c],
                                       gl.SwizzledSharedLayout(16, 16, 8, [1, 0]))
    s_ring = gl.allocate_shared_memory(gl.float32, [STAGES, TILE], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    for s in gl.static_range(STAGES - 1):
        _issue_tile(x_ring, s_ring, s, pid + s * programs, x_ptr, s_in_ptr, M, C, n_tiles, n_tok, stride_sig,
                    STRIDE, G_IN, block_c, WARPS, EVEN_M, EVEN_C)
    for i in range(gl.cdiv(n_tiles - pid, programs)):
        cp.wait_group(STAGES - 2)  # this thread's copies of tile i have landed
        gl.thread_barrier()  # everyone's have, and everyone has read the slot the next copy overwrites
        _issue_tile(x_ring, s_ring, (i + STAGES - 1) % STAGES, pid + (i + STAGES - 1) * programs, x_ptr,
                    s_in_ptr, M, C, n_tiles, n_tok, stride_sig, STRIDE, G_IN, block_c, WARPS, EVEN_M, EVEN_C)
        tile = pid + i * programs
        x = x_ring.index(i % STAGES).load(layout)
        s_in = s_ring.index(i % STAGES).load(gl.SliceLayout(1, layout))
        G.quantize_tokens_transposed(x.to(gl.float32) * s_in[:, None], q_ptr, s_ptr, (tile % n_tok) * TILE,
                                     (tile // n_tok) * block_c, C, M_pad, WARPS, TOKEN_LANES, EVEN_C, FMAX,
                                     RFMAX, MBITS, EMIN, POW2, BLOCK_SCALE)
    cp.wait_group(0)


def available(device: torch.device) -> bool:
    """Whether this kernel can run on `device`: Triton 3.6 on Hopper."""
    return _TRITON == GLUON_TRITON and device.type == "cuda" and _device(device.index or 0).major == 9


def runs(q_in: Quantized, fmt: QuantFormat) -> bool:
    """Whether this kernel takes the re-quantization: `available`, FP8 row-major data with M-major input scales in
    groups of a multiple of the program's columns, 128-token output groups with fp32 scales. Power-of-two output
    scales stay on the Triton kernel, which issues few instructions with them and ran 81-84% of copy on an H100
    where this kernel, at 90 registers (two 8-warp programs an SM), ran 70-78%."""
    return (_fp8_rows(q_in.data) and q_in.scale.stride(0) == 1
            and q_in.fmt.group % G.block_columns(WARPS, TOKEN_LANES) == 0 and fmt.group == TILE.value
            and fmt.scale is ScaleKind.FP32)


def runs_blocks(q_in: Quantized, fmt: QuantFormat) -> bool:
    """Whether this kernel takes a re-quantization into 128x128 blocks: `available`, FP8 row-major data, the
    Triton kernel's operands (`triton_quant.requantizes_blocks`: 1x128 input groups, 128x128 output blocks), fp32
    output scales (as `runs`)."""
    return _fp8_rows(q_in.data) and T.requantizes_blocks(q_in, fmt) and fmt.scale is ScaleKind.FP32


def ring_copies(x: torch.Tensor) -> bool:
    """Whether the ring's cp.async can copy saved activation `x`'s rows, in 16-byte runs from 16-byte boundaries:
    AUTO's choice of the ring (module docstring)."""
    return x.shape[1] % 16 == 0 and x.stride(0) % 16 == 0 and x.data_ptr() % 16 == 0


def _fp8_rows(x: torch.Tensor) -> bool:
    """What both layouts need of the saved activation: `available` on its device, FP8, 2-D, rows contiguous."""
    return available(x.device) and x.dtype in _FP8_GL and x.dim() == 2 and x.stride(1) == 1


def requantize_tokens_transposed(q_in: Quantized, fmt: QuantFormat, warps: int = WARPS,
                                 token_lanes: int = TOKEN_LANES, ring: bool | None = None) -> Quantized:
    """`triton_quant.requantize_tokens_transposed(q_in, fmt)`'s bytes, for operands `runs` takes. `warps` and
    `token_lanes` (4 or 8; warps x 16 x token_lanes >= 128) and `ring` (None: where `ring_copies`) are for
    benchmarks."""
    m, c = q_in.data.shape
    out = tokens_buffers(m, c, fmt, q_in.data.device)
    return _launch(q_in, out, out.scale.t(), fmt, warps, token_lanes, False, ring)  # scales [M_pad/G, C]


def requantize_blocks_transposed(q_in: Quantized, fmt: QuantFormat, token_lanes: int = TOKEN_LANES,
                                 ring: bool | None = None) -> Quantized:
    """`triton_quant.requantize_blocks_transposed(q_in, fmt)`'s bytes, for operands `runs_blocks` takes: a program
    of 8 warps holds one 128x128 block. `token_lanes` (4 or 8) and `ring` (None: where `ring_copies`) are for
    benchmarks."""
    m, c = q_in.data.shape
    out = blocks_t_buffers(m, c, fmt, q_in.data.device)
    return _launch(q_in, out, out.scale, fmt, WARPS, token_lanes, True, ring)


def _launch(q_in: Quantized, out: Quantized, scale: torch.Tensor, fmt: QuantFormat, warps: int, token_lanes: int,
            block_scale: bool, ring: bool | None) -> Quantized:
    block_c = G.block_columns(warps, token_lanes)
    if q_in.fmt.group % block_c:
        raise OperandError(f"a program's {block_c} columns must lie in one input group, got groups of "
                           f"{q_in.fmt.group}")
    x, q = q_in.data, out.data
    if ring is None:
        ring = ring_copies(x)
    elif ring and not ring_copies(x):
        raise OperandError(f"the ring copies rows in 16-byte runs from 16-byte boundaries: got {x.shape[1]} "
                           f"columns, row stride {x.stride(0)}, address {x.data_ptr():#x}")
    m, c = x.shape
    if q.numel() == 0:
        return out
    args = T._fmt_args(fmt, False)
    constexprs = dict(STRIDE=x.stride(0), G_IN=q_in.fmt.group, WARPS=warps, TOKEN_LANES=token_lanes,
                      EVEN_M=m % TILE.value == 0, EVEN_C=c % block_c == 0, FMAX=args["FMAX"], RFMAX=args["RFMAX"],
                      MBITS=args["MBITS"], EMIN=args["EMIN"], POW2=args["POW2"], BLOCK_SCALE=block_scale,
                      num_warps=warps, enable_fp_fusion=False)
    n_tok, n_col = q.shape[1] // TILE.value, triton.cdiv(c, block_c)
    if ring:
        programs = min(n_tok * n_col, _device(x.device.index or 0).multi_processor_count * RING_WARPS_PER_SM // warps)
        _ring_kernel[(programs,)](x, q_in.scale, q, scale, m, c, q.shape[1], q_in.scale.stride(1), n_tok * n_col,
                                  n_tok, STAGES=RING_STAGES, **constexprs)
    else:
        _requant_kernel[(n_tok, n_col)](x, q_in.scale, q, scale, m, c, q.shape[1], q_in.scale.stride(1),
                                        **constexprs)
    return out
