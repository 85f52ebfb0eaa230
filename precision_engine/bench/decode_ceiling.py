"""`precision bench ceiling --decode`: how far a whole FP8 linear's decode forward (M = 1..64) could get ahead of
BF16's on this GPU, measured in one run.

At decode sizes a linear streams its weight: BF16 reads two bytes per weight, FP8 one (plus 4 per 128x128 block
scale), so the bytes allow up to 2x. No kernel streams them faster than the GPU streams memory at that size, and
every launch in a graph costs a floor: the whole FP8 linear launches twice (Q(x), then the GEMM) where BF16
launches once. For each (N, K) and M this times, as CUDA-graph replays of one call per input set over rotating
sets (as `bench linear`'s decode rows):

  bf16          F.linear(x, W): cuBLAS's BF16 GEMM, the baseline;
  stream        the FP8 weight's bytes and its block scales moved once, the faster of two stand-ins: a read
                (`_read_words_kernel`: every byte loaded in 16-byte vectors, one word written per program) and a
                copy of half the bytes into the other half (as many bytes, half of them written). The faster
                one is the weight at the speed this GPU streams memory at that size, in one launch, as a decode
                GEMM must. Neither alone is a floor: on an H200 the copy runs slower than a read at large sizes
                (45.5 us for the 28672x4096 weight, where our whole linear took 34 us) and torch.sum's read slower
                than the copy at small ones (12.0 us against 8.4 for 4096x4096), both in this bench's first runs;
  stream+cast   that stand-in, then x cast to FP8 (reads x, writes a byte per value, no scales): the cheapest
                Q(x) a whole linear can run before its GEMM.

Ceilings: BF16 ms / stream ms (the weight's bytes alone) and BF16 ms / stream+cast ms (the whole linear's),
beside `bench linear`'s fp8_bi decode ratio on the same shape, against issue 12's 1.5x. A target above the whole
linear's ceiling is out of reach for a linear that quantizes x in a launch of its own; a producer that quantizes
(the decoder's RMSNorm and SiLU*mul) removes that launch, leaving the weight's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from precision_engine.bench.gemm import DECODE_M, DECODE_TARGET, QUICK_SHAPES, SHAPES_8B, timed_turns
from precision_engine.bench.timing import rotation
from precision_engine.numerics.capabilities import SCALE_BLOCK

STAND_INS = ("read", "copy")
KINDS = ("bf16", *STAND_INS, *(f"{kind}_cast" for kind in STAND_INS))
READ_STEP_WORDS = 2048  # int32 words a program loads per step: 8 warps x 32 threads x two 16-byte vectors
READ_STEPS = 4  # steps per program, all loads issued before the first xor needs them


def weight_bytes(n: int, k: int) -> int:
    """An FP8 weight's bytes with its FP32 128x128 block scales: what its decode GEMM must read."""
    return n * k + 4 * -(-n // SCALE_BLOCK) * -(-k // SCALE_BLOCK)


@triton.jit
def _read_words_kernel(src_ptr, out_ptr, n, STEP_WORDS: tl.constexpr, STEPS: tl.constexpr):
    """out[program] = xor of the program's STEP_WORDS * STEPS words of src: each byte read once, next to nothing
    written."""
    base = tl.program_id(0).to(tl.int64) * (STEP_WORDS * STEPS)
    offs = tl.arange(0, STEP_WORDS)
    acc = tl.zeros([STEP_WORDS], dtype=tl.int32)
    for step in tl.static_range(STEPS):
        idx = base + step * STEP_WORDS + offs
        acc ^= tl.load(src_ptr + idx, mask=idx < n, other=0)
    tl.store(out_ptr + tl.program_id(0), tl.xor_sum(acc, 0))


def read_words(src: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`_read_words_kernel` over int32 src (a multiple of 16 words, so the masked loads stay vectors) into out,
    one word per program (`read_programs`)."""
    _read_words_kernel[(out.numel(),)](src, out, src.numel(), STEP_WORDS=READ_STEP_WORDS, STEPS=READ_STEPS,
                                       num_warps=8)
    return out


def read_programs(words: int) -> int:
    return -(-words // (READ_STEP_WORDS * READ_STEPS))


def ceilings(row: dict) -> dict:
    """From a row's `<kind>_ms`: the stream (the faster stand-in), the weight-bytes and whole-linear ceilings, the
    target, and whether the target is within the whole linear's."""
    stream_ms = min(row[f"{kind}_ms"] for kind in STAND_INS)
    stream_cast_ms = min(row[f"{kind}_cast_ms"] for kind in STAND_INS)
    with_quant_x = row["bf16_ms"] / stream_cast_ms
    return {"stream_ms": stream_ms, "stream_cast_ms": stream_cast_ms, "weights_x": row["bf16_ms"] / stream_ms,
            "with_quant_x": with_quant_x, "target": DECODE_TARGET, "reachable": with_quant_x >= DECODE_TARGET}


def _decode_timers(n: int, k: int, m: int, device: str) -> tuple[Callable[[], tuple], dict[str, Callable], int]:
    """(make one input set, {kind: its call on a set}, bytes of a set) for one (N, K, M) (module doc)."""
    words = -(-weight_bytes(n, k) // 64) * 16  # whole 16-word vectors: at most 60 bytes over the weight's
    half = 2 * words

    def make():
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=device, dtype=torch.bfloat16)
        w8 = torch.randint(0, 256, (4 * words,), device=device, dtype=torch.uint8)
        partials = torch.empty(read_programs(words), device=device, dtype=torch.int32)
        return x, w, w8, partials, torch.empty(m, k, device=device, dtype=torch.float8_e4m3fn)

    def read(x, w, w8, partials, x8):
        read_words(w8.view(torch.int32), partials)

    def copy(x, w, w8, partials, x8):
        w8[half:].copy_(w8[:half])

    def then_cast(stand_in):
        def run(x, w, w8, partials, x8):
            stand_in(x, w, w8, partials, x8)
            x8.copy_(x)
        return run

    timers = {"bf16": lambda x, w, *_: F.linear(x, w), "read": read, "copy": copy,
              "read_cast": then_cast(read), "copy_cast": then_cast(copy)}
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
            times = timed_turns(list(timers.values()), sets, graphed=graphed, warmup=warmup, reps=reps)
            row.update({f"{kind}_ms": ms for kind, ms in zip(timers, times)})
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
            f"{c['stream_ms'] * 1e3:.1f} us, + Q(x) cast {c['stream_cast_ms'] * 1e3:.1f} us); target "
            f"{c['target']:.2f}x {verdict}")


def summary(rows: list[dict]) -> str:
    """The target's count over the rows: met, short and beyond the whole linear's ceiling, short within reach
    (named: what is left to do)."""
    short = [r for r in rows if r["achieved"]["fp8_bi"] < DECODE_TARGET]
    within = [r for r in short if r["ceilings"]["reachable"]]
    named = "".join(f"; {r['n']}x{r['k']} M = {r['m']} ({r['achieved']['fp8_bi']:.2f}x against "
                    f"{r['ceilings']['with_quant_x']:.2f}x)" for r in within)
    return (f"target {DECODE_TARGET:.2f}x: met on {len(rows) - len(short)} of {len(rows)} rows; short and beyond the "
            f"whole linear's ceiling on {len(short) - len(within)}; short within reach on {len(within)}{named}")


def format_table(rows: list[dict]) -> str:
    head = (f"{'N x K':>13} {'M':>4}  x BF16, same run, CUDA-graph replays; ceilings: the FP8 weight's bytes "
            "streamed (the faster of a read and a copy) / and x cast to FP8 first (the whole linear)")
    return "\n".join([head, *map(format_row, rows), summary(rows)])
