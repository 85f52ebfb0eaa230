"""Probe (not the package): the shipped Gluon wgrad re-quantizer (`gluon_requant._requant_kernel`, same program,
same bits) with its programs walked in another order.

Why: the shipped grid walks token tiles fastest. At 80 registers three 8-warp programs fit an SM, so about 396
programs are resident on 132 SMs; at 8192x4096 they cover 6 column strips, so each input row is read in runs of
about 768 bytes (128 a program, rows 4 KB apart), each output row written whole (8 KB); at 14336 columns the runs
read are about 450 bytes. On the H100 the kernel reaches 91-93% of a copy of its own bytes, on the H200 75-79.6%
(forty-seventh session); the cp.async ring, which keeps more loads in flight, did not help on the H100
(forty-ninth session). If the H200's DRAM pays more for short runs, the order of programs matters. Here a
program's (token tile, column strip) comes from a 1-D program id swizzled as GEMMs group their tiles: groups of
GROUP token tiles, column strips walked within a group, token tiles fastest. GROUP = 1 walks columns fastest
(at 8192x4096 about 12 token tiles resident: whole input rows read, output rows written in runs of 1.5 KB);
GROUP >= the token tiles is the shipped order. Only the order changes, so the bits cannot, and `check` says so
first. ptxas (Triton 3.6, sm_90a, offline): 80 registers, 9.8 SASS an element (the shipped kernel 80 and 9.7).

    PYTHONPATH=$PWD python benchmarks/2026-12-07/s50_calls/requant_order.py check  # GPU: bytes == Triton kernel's
    PYTHONPATH=$PWD python benchmarks/2026-12-07/s50_calls/requant_order.py bench  # GPU: % of copy, in turns
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from precision_engine.numerics import gluon_tokens as G
from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.contract import Quantized, tokens_buffers
from precision_engine.numerics.formats import QuantFormat
from precision_engine.numerics.gluon_requant import TOKEN_LANES, WARPS, _requant_tile
from precision_engine.numerics.gluon_tokens import TILE


@gluon.jit
def _order_kernel(x_ptr, s_in_ptr, q_ptr, s_ptr, M, C, M_pad, stride_sig, n_tok, N_COL: gl.constexpr,
                  GROUP: gl.constexpr, EVEN_GROUP: gl.constexpr, STRIDE: gl.constexpr, G_IN: gl.constexpr,
                  WARPS: gl.constexpr, TOKEN_LANES: gl.constexpr,
                  EVEN_M: gl.constexpr, EVEN_C: gl.constexpr, FMAX: gl.constexpr, RFMAX: gl.constexpr,
                  MBITS: gl.constexpr, EMIN: gl.constexpr, POW2: gl.constexpr):
    """`gluon_requant._requant_kernel` (fp32 scales, 128x1 output groups), its (token tile, column strip) from a
    1-D program id in groups of GROUP token tiles (EVEN_GROUP: every group whole)."""
    pid = gl.program_id(0)
    per_group: gl.constexpr = GROUP * N_COL
    first = (pid // per_group) * GROUP
    if EVEN_GROUP:
        height = GROUP
    else:
        height = gl.minimum(n_tok - first, GROUP)
    tok0 = (first + (pid % per_group) % height) * TILE
    col0 = ((pid % per_group) // height) * G.block_columns(WARPS, TOKEN_LANES)
    _requant_tile(x_ptr, s_in_ptr, q_ptr, s_ptr, tok0, col0, M, C, M_pad, stride_sig, STRIDE, G_IN, WARPS,
                  TOKEN_LANES, EVEN_M, EVEN_C, FMAX, RFMAX, MBITS, EMIN, POW2, False)


def requantize_tokens_transposed(q_in: Quantized, fmt: QuantFormat, group: int) -> Quantized:
    """`gluon_requant.requantize_tokens_transposed(q_in, fmt)`'s bytes (operands it `runs`), programs in groups of
    `group` token tiles."""
    x = q_in.data
    m, c = x.shape
    out = tokens_buffers(m, c, fmt, x.device)
    block_c = G.block_columns(WARPS, TOKEN_LANES)
    n_tok, n_col = out.data.shape[1] // TILE.value, triton.cdiv(c, block_c)
    if n_tok * n_col == 0:
        return out
    args = T._fmt_args(fmt, False)
    _order_kernel[(n_tok * n_col,)](
        x, q_in.scale, out.data, out.scale.t(), m, c, out.data.shape[1], q_in.scale.stride(1), n_tok, N_COL=n_col,
        GROUP=group, EVEN_GROUP=n_tok % group == 0, STRIDE=x.stride(0), G_IN=q_in.fmt.group, WARPS=WARPS,
        TOKEN_LANES=TOKEN_LANES, EVEN_M=m % TILE.value == 0, EVEN_C=c % block_c == 0, FMAX=args["FMAX"],
        RFMAX=args["RFMAX"], MBITS=args["MBITS"], EMIN=args["EMIN"], POW2=args["POW2"], num_warps=WARPS,
        enable_fp_fusion=False)
    return out


GROUPS = [1, 2, 4, 8, 16, 32]
ODD_SHAPES = [(1000, 4096), (8192 - 37, 4000), (128, 128), (300, 272), (130, 4096 + 128)]
ORDERS = {f"group {g}": lambda q, fmt, g=g: requantize_tokens_transposed(q, fmt, g) for g in GROUPS}


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "2026-12-06" / "s49_calls"))
    import requant_ring  # the ring probe's check and bench, given these orders

    if sys.argv[1] == "check":
        requant_ring.check(ORDERS, requant_ring.SHAPES[:2] + ODD_SHAPES)
    else:
        requant_ring.bench(int(sys.argv[2]) if len(sys.argv) > 2 else 30, ORDERS)
