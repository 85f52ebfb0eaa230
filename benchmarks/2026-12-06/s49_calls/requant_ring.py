"""Probe (not the package): the Gluon wgrad re-quantizer with its input fed through an asynchronous ring in shared
memory, output stored from registers as `gluon_requant` stores it.

Why: on the H200 `gluon_requant` runs at 62.5-73.9% of copy (75-79.6% of a copy of its own bytes) against 91-93%
on the H100. A program loads its whole 16 KB tile into registers, then quantizes, then stores; at 80 registers
three 8-warp programs fit an SM, so about one and a half tiles' loads are in flight an SM, and the H200's
bandwidth needs about 1.4x the H100's bytes in flight (Little's law). Registers bound what a thread can have in
flight (two tiles a program: 127 registers; a register prefetch: 198), shared memory does not: here each
persistent program keeps STAGES - 1 tiles (and their scales) in flight by ``cp.async`` while it quantizes the
one before. The earlier TMA version (twenty-sixth session) also moved the output through shared memory, 14.2 SASS
an element; the output here is `gluon_tokens.quantize_tokens_transposed`'s, unchanged.

Shared memory: the tile [128 tokens, 128 columns] FP8 is swizzled in 16-byte chunks, chunk ^= (token // 16) % 8,
so that `tile_layout`'s 4-byte reads (a warp: 8 token lanes 16 tokens apart x 4 column lanes) fall in 8 distinct
chunks, and the copy's 16-byte writes (a warp: 4 whole rows) stay conflict-free (ptxas reads it with ldmatrix).

Measured (BENCHMARKS.md): the Triton kernel's bits on every shape tried; on an H100 the best variant 0.5-2.7% slower
than the shipped kernel (forty-ninth session); on an H200 5.6-12.9 points of copy faster (fifty-first session), so
the kernel moved into the package (`gluon_requant._ring_kernel`, AUTO's program on the H200), which this probe now
launches with its own stages, programs an SM and register caps.

    PYTHONPATH=$PWD python benchmarks/2026-12-06/s49_calls/requant_ring.py check  # GPU: bytes == Triton kernel's
    PYTHONPATH=$PWD python benchmarks/2026-12-06/s49_calls/requant_ring.py bench  # GPU: % of copy, in turns
"""

from __future__ import annotations

import sys

import torch
import triton

from precision_engine.numerics import gluon_tokens as G
from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.contract import Quantized, tokens_buffers
from precision_engine.numerics.formats import QuantFormat
from precision_engine.numerics.gluon_requant import _ring_kernel
from precision_engine.numerics.gluon_tokens import TILE


def requantize_tokens_transposed(q_in: Quantized, fmt: QuantFormat, stages: int = 3, programs_per_sm: int = 3,
                                 warps: int = 8, token_lanes: int = 8, **options) -> Quantized:
    """`gluon_requant.requantize_tokens_transposed(q_in, fmt)`'s bytes (operands it `runs`), through the ring."""
    x = q_in.data
    m, c = x.shape
    if c % 16 or x.stride(0) % 16:
        raise ValueError(f"cp.async copies 16-byte runs of a row: columns and row stride must be multiples of 16, "
                         f"got {c} and {x.stride(0)}")
    out = tokens_buffers(m, c, fmt, x.device)
    block_c = G.block_columns(warps, token_lanes)
    n_tok, n_col = out.data.shape[1] // TILE.value, triton.cdiv(c, block_c)
    n_tiles = n_tok * n_col
    if n_tiles == 0:
        return out
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    args = T._fmt_args(fmt, False)
    _ring_kernel[(min(n_tiles, sms * programs_per_sm),)](
        x, q_in.scale, out.data, out.scale.t(), m, c, out.data.shape[1], q_in.scale.stride(1), n_tiles, n_tok,
        STRIDE=x.stride(0), G_IN=q_in.fmt.group, WARPS=warps, TOKEN_LANES=token_lanes, STAGES=stages,
        EVEN_M=m % TILE.value == 0, EVEN_C=c % block_c == 0, FMAX=args["FMAX"], RFMAX=args["RFMAX"],
        MBITS=args["MBITS"], EMIN=args["EMIN"], POW2=args["POW2"], BLOCK_SCALE=False, num_warps=warps,
        enable_fp_fusion=False, **options)
    return out


# (warps, token lanes, stages, programs an SM, maxnreg). ptxas (Triton 3.6, sm_90a), registers a thread: 8-warp
# programs 125 (two an SM), 80 with 22 spill instructions (three); 4-warp 123 (four), 96 without spills (five);
# 2-warp 96 without spills (ten).
VARIANTS = [(8, 8, 3, 2, None), (8, 8, 2, 2, None), (8, 8, 4, 2, None), (8, 8, 3, 3, 80), (4, 8, 3, 4, None),
            (4, 8, 3, 5, 96), (4, 8, 4, 5, 96), (2, 8, 3, 10, 96)]
SHAPES = [(8192, 4096), (16384, 4096), (8192, 14336), (16384, 14336)]
ODD_SHAPES = [(1000, 4096), (8192 - 37, 4000), (128, 128), (300, 272)]  # cp.async: columns in 16-byte runs


def ring(variant):
    warps, lanes, stages, per_sm, maxnreg = variant
    return lambda q, fmt: requantize_tokens_transposed(q, fmt, stages, per_sm, warps, lanes,
                                                       **({"maxnreg": maxnreg} if maxnreg else {}))


def label(variant) -> str:
    warps, lanes, stages, per_sm, maxnreg = variant
    return f"ring w{warps} t{lanes} s{stages} {per_sm}/SM" + (f" r{maxnreg}" if maxnreg else "")


def check(variants: dict | None = None, shapes=None) -> None:
    """Every variant's bytes and scales (name -> fn(q, fmt); default the ring's) equal the Triton kernel's, bitwise,
    on whole and ragged shapes, fp32 scales (the Gluon kernels' operands); raises on the first difference."""
    from precision_engine.numerics import quantize as Q
    from precision_engine.numerics.formats import PRESET_FORMATS

    variants = variants or {label(v): ring(v) for v in VARIANTS}
    act, tok = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]
    for seed, (m, c) in enumerate(shapes or SHAPES[:2] + ODD_SHAPES):
        torch.manual_seed(seed)
        x = torch.randn(m, c, device="cuda", dtype=torch.bfloat16) * torch.rand(m, 1, device="cuda") * 8
        q = Q.quantize_rows_1xG(x, act)
        ref = T.requantize_tokens_transposed(q, tok)
        for name, fn in variants.items():
            out = fn(q, tok)
            same = (torch.equal(out.data.view(torch.uint8), ref.data.view(torch.uint8))
                    and torch.equal(out.scale.view(torch.int32), ref.scale.view(torch.int32)))
            if not same:
                raise SystemExit(f"{name} differs from the Triton kernel at {m}x{c}")
        print(f"check {m}x{c}: {len(variants)} variants bitwise equal to the Triton kernel")


def bench(reps: int, variants: dict | None = None) -> None:
    """% of a 1 GiB copy (the targets' yardstick) and of a copy of the same bytes, all in turns a shape: a copy of
    the same bytes, the shipped kernel, then each variant (name -> fn(q, fmt); default the ring's)."""
    from precision_engine.bench.quant import copy_bandwidth, requantize_bytes
    from precision_engine.bench.timing import gbps, median, rotation, time_cuda_turns
    from precision_engine.numerics import gluon_requant
    from precision_engine.numerics import quantize as Q
    from precision_engine.numerics.formats import PRESET_FORMATS

    variants = variants or {label(v): ring(v) for v in VARIANTS}
    act, tok = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]
    copy_gbps = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}; "
          f"copy {copy_gbps:.0f} GB/s")
    for m, c in SHAPES:
        nbytes = requantize_bytes(m, c)

        def inputs():
            x = torch.randn(m, c, device="cuda", dtype=torch.bfloat16)
            return (Q.quantize_rows_1xG(x, act), torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8),
                    torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8))

        names = ["copy, same bytes", "gluon_requant (shipped)"] + list(variants)
        fns = [lambda q, src, dst: dst.copy_(src), lambda q, src, dst: gluon_requant.requantize_tokens_transposed(
            q, tok)] + [lambda q, src, dst, f=f: f(q, tok) for f in variants.values()]
        sets = rotation(inputs, 2 * nbytes)
        times = time_cuda_turns(fns, warmup=5, reps=reps, inputs_rotation=sets)
        del sets
        same = median(times[0])
        for name, t in zip(names, times):
            ms = median(t)
            print(f"{m}x{c} | {name:<28} | {ms * 1e3:8.1f} us | {100 * gbps(nbytes, ms) / copy_gbps:5.1f}% copy | "
                  f"{100 * same / ms:5.1f}% same-bytes copy")


if __name__ == "__main__":
    if sys.argv[1] == "check":
        check()
    else:
        bench(int(sys.argv[2]) if len(sys.argv) > 2 else 30)
