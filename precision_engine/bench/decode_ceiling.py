"""`precision bench ceiling --decode`: how far a whole FP8 linear's decode forward (M = 1..64) could get ahead of
BF16's on this GPU, measured in one run.

At decode sizes a linear streams its weight: BF16 reads two bytes per weight, FP8 one (plus 4 per 128x128 block
scale), so the bytes allow up to 2x. No kernel streams them faster than the GPU copies memory at that size, and
every launch in a graph costs a floor: the whole FP8 linear launches twice (Q(x), then the GEMM) where BF16
launches once. For each (N, K) and M this times, as CUDA-graph replays of one call per input set over rotating
sets (as `bench linear`'s decode rows):

  bf16          F.linear(x, W): cuBLAS's BF16 GEMM, the baseline;
  stream        one read of the FP8 weight's bytes and its block scales (a sum over them, read as float32
                words, that writes one value): the weight at the speed the GPU reads memory at that size, in one
                launch, as a decode GEMM streams it;
  stream+cast   that read, then x cast to FP8 (reads x, writes a byte per value, no scales): the cheapest Q(x)
                a whole linear can run before its GEMM.

A copy is no stand-in for the read: it writes half the bytes it moves, and an H200 copies at a lower rate than it
reads (first run of this bench, timing a copy of the weight's bytes: 45.5 us for the 28672x4096 weight, where our
whole FP8 linear took 34 us).

Ceilings: BF16 ms / stream ms (the weight's bytes alone) and BF16 ms / stream+cast ms (the whole linear's),
beside `bench linear`'s fp8_bi decode ratio on the same shape, against issue 12's 1.5x. A target above the whole
linear's ceiling is out of reach for a linear that quantizes x in a launch of its own; a producer that quantizes
(the decoder's RMSNorm and SiLU*mul) removes that launch, leaving the weight's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from precision_engine.bench.gemm import DECODE_M, QUICK_SHAPES, SHAPES_8B, timed
from precision_engine.bench.timing import rotation

TARGET = 1.5  # issue 12: whole-linear decode forward, every shape, M = 1..64
BLOCK = 128
KINDS = ("bf16", "stream", "stream_cast")


def weight_bytes(n: int, k: int) -> int:
    """An FP8 weight's bytes with its FP32 128x128 block scales: what its decode GEMM must read."""
    return n * k + 4 * -(-n // BLOCK) * -(-k // BLOCK)


def ceilings(row: dict) -> dict:
    """From a row's `<kind>_ms`: the weight-bytes and whole-linear ceilings, the target, and whether the target is
    within the whole linear's."""
    weights_x, with_quant_x = row["bf16_ms"] / row["stream_ms"], row["bf16_ms"] / row["stream_cast_ms"]
    return {"weights_x": weights_x, "with_quant_x": with_quant_x, "target": TARGET,
            "reachable": with_quant_x >= TARGET}


def _decode_timers(n: int, k: int, m: int, device: str) -> tuple[Callable[[], tuple], dict[str, Callable], int]:
    """(make one input set, {kind: its call on a set}, bytes of a set) for one (N, K, M) (module doc)."""
    words = -(-weight_bytes(n, k) // 4)

    def make():
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=device, dtype=torch.bfloat16)
        w8 = torch.randint(0, 256, (4 * words,), device=device, dtype=torch.uint8).view(torch.float32)
        return x, w, w8, torch.empty(m, k, device=device, dtype=torch.float8_e4m3fn)

    def stream_cast(x, w, w8, x8):
        torch.sum(w8)
        x8.copy_(x)

    timers = {
        "bf16": lambda x, w, *_: F.linear(x, w),
        "stream": lambda x, w, w8, x8: torch.sum(w8),
        "stream_cast": stream_cast,
    }
    return make, timers, 2 * n * k + 4 * words + 3 * m * k


def bench_decode_ceiling(*, quick: bool = False, reps: int = 30, warmup: int = 5,
                         shapes: Sequence[tuple[int, int]] | None = None, ms: Sequence[int] | None = None,
                         device: str = "cuda", on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """One row per (shape, M): each kind's ms, the weight's FP8 bytes, the ceilings (`ceilings`) and our linear's
    fp8_bi ratio from `bench linear` on the same shape (`achieved`). `shapes` (N, K) and `ms` override the 8B
    lists (or --quick's: M = 1); `device` cpu runs the same loop eagerly at toy sizes (tests: the wiring, not a
    measurement)."""
    from precision_engine.bench.linear import bench_linear

    graphed = torch.device(device).type == "cuda"
    rows = []
    for n, k in shapes or (QUICK_SHAPES if quick else SHAPES_8B):
        for m in ms or (DECODE_M[:1] if quick else DECODE_M):
            make, timers, nbytes = _decode_timers(n, k, m, device)
            sets = rotation(make, nbytes)
            row = {"n": n, "k": k, "m": m, "weight_bytes": weight_bytes(n, k)}
            for kind, fn in timers.items():
                row[f"{kind}_ms"] = timed(fn, sets, graphed=graphed, warmup=warmup, reps=reps)
            del sets
            row["ceilings"] = ceilings(row)
            (linear,) = bench_linear(shapes=[(n, k)], ms=[m], variants=("bf16", "fp8_bi"), device=device,
                                     reps=reps, warmup=warmup)
            row["achieved"] = {"fp8_bi": linear["fp8_bi_x"]}
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


def format_row(r: dict) -> str:
    c = r["ceilings"]
    verdict = "within reach" if c["reachable"] else "beyond a linear that quantizes x in its own launch"
    return (f"{r['n']:>6}x{r['k']:<6} {r['m']:>4}  fp8_bi {r['achieved']['fp8_bi']:.2f}x; ceiling "
            f"{c['weights_x']:.2f}x / {c['with_quant_x']:.2f}x (bf16 {r['bf16_ms'] * 1e3:.1f} us, weight stream "
            f"{r['stream_ms'] * 1e3:.1f} us, + Q(x) cast {r['stream_cast_ms'] * 1e3:.1f} us); target "
            f"{c['target']:.2f}x {verdict}")


def format_table(rows: list[dict]) -> str:
    head = (f"{'N x K':>13} {'M':>4}  x BF16, same run, CUDA-graph replays; ceilings: the FP8 weight's bytes at "
            "read speed / and x cast to FP8 first (the whole linear)")
    return "\n".join([head, *map(format_row, rows)])
