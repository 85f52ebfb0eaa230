"""Batch-invariant kernels against the libraries they replace: `linear` vs cuBLAS (F.linear) and `attention` vs
F.scaled_dot_product_attention, on Llama-3.1-8B shapes in one run.

Decode sizes are timed as CUDA-graph replays over input sets larger than the L2 (as a rollout engine runs
them, see bench/gemm.py), training and prefill sizes eagerly. `python -m precision_engine.bench.invariant`
prints the table; `--quick` times one shape per kind.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch
import torch.nn.functional as F

from precision_engine.bench.gemm import timed_turns
from precision_engine.bench.timing import rotation

# (name, N, K): Llama-3.1-8B projections (out, in features) and the lm_head
LINEAR_SHAPES: tuple[tuple[str, int, int], ...] = (
    ("q", 4096, 4096), ("kv", 1024, 4096), ("o", 4096, 4096), ("gate/up", 14336, 4096),
    ("down", 4096, 14336), ("lm_head", 128256, 4096),
)
DECODE_M = (1, 8, 64)
TRAIN_M = (8192,)
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def _linear_rows(shapes, ms, *, reps: int, warmup: int) -> list[tuple]:
    from precision_engine.numerics.triton_invariant import LINEAR, linear, linear_forward

    persistent = replace(LINEAR, persistent=True)
    rows = []
    for name, n, k in shapes:
        for m in ms:

            def make(m=m, n=n, k=k):
                return (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                        torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02)

            sets = rotation(make, (m + n) * k * 2)
            graphed = m <= DECODE_M[-1]
            calls = [F.linear, linear]
            if not graphed:  # the persistent launch, same bits: is it the faster one at training sizes?
                calls.append(lambda x, w: linear_forward(x, w, split=False, config=persistent))
            base, ours, *persistent_ms = timed_turns(calls, sets, graphed=graphed, warmup=warmup, reps=reps)
            rows.append((f"linear {name}", f"M={m} N={n} K={k}", ours, base, base / ours))
            for ms_p in persistent_ms:
                rows.append((f"linear {name} [persistent]", f"M={m} N={n} K={k}", ms_p, base, base / ms_p))
            del sets
    return rows


def _attention_rows(*, reps: int, warmup: int, quick: bool) -> list[tuple]:
    from precision_engine.numerics.triton_invariant import attention

    rows = []
    d, scale = HEAD_DIM, HEAD_DIM ** -0.5
    # decode: batch 64, one query each at position 383 against a 384-slot cache (capacity 512)
    b, ctx, cap = 64, 384, 512

    def make_decode():
        q = torch.randn(b, HEADS, 1, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, KV_HEADS, cap, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        return q, k, v, torch.full((b, 1), ctx - 1, device="cuda"), torch.full((b,), ctx, device="cuda")

    sets = rotation(make_decode, b * KV_HEADS * ctx * d * 2 * 2)
    ours, base = timed_turns(
        [lambda q, k, v, p, n: attention(q, k, v, p, n, scale=scale),
         lambda q, k, v, p, n: F.scaled_dot_product_attention(q, k[:, :, :ctx], v[:, :, :ctx], scale=scale,
                                                              enable_gqa=True)],
        sets, graphed=True, warmup=warmup, reps=reps)
    rows.append(("attention decode", f"B={b} Hq={HEADS} Hkv={KV_HEADS} D={d} ctx={ctx}", ours, base, base / ours))
    del sets
    if quick:
        return rows
    # prefill: batch 8, 512 tokens, causal
    b, t = 8, 512

    def make_prefill():
        q = torch.randn(b, HEADS, t, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, KV_HEADS, t, d, device="cuda", dtype=torch.bfloat16)
        pos = torch.arange(t, device="cuda").repeat(b, 1)
        return q, k, torch.randn_like(k), pos, torch.full((b,), t, device="cuda")

    sets = rotation(make_prefill, (b * HEADS * t * d + 2 * b * KV_HEADS * t * d) * 2)
    ours, base = timed_turns(
        [lambda q, k, v, p, n: attention(q, k, v, p, n, scale=scale),
         lambda q, k, v, p, n: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)],
        sets, graphed=False, warmup=warmup, reps=reps)
    rows.append(("attention prefill", f"B={b} Hq={HEADS} Hkv={KV_HEADS} D={d} T={t}", ours, base, base / ours))
    return rows


def bench_invariant(*, quick: bool = False, reps: int = 50, warmup: int = 10) -> list[tuple]:
    """Rows of (name, shape, ms ours, ms baseline, ratio = baseline / ours: > 1 means ours is faster)."""
    if not torch.cuda.is_available():
        raise RuntimeError("bench_invariant needs a CUDA GPU")
    shapes = LINEAR_SHAPES[:1] + LINEAR_SHAPES[-1:] if quick else LINEAR_SHAPES
    rows = _linear_rows(shapes, DECODE_M + TRAIN_M, reps=reps, warmup=warmup)
    return rows + _attention_rows(reps=reps, warmup=warmup, quick=quick)


def format_rows(rows: list[tuple]) -> str:
    lines = [f"{'kernel':<28} {'shape':<40} {'ours ms':>9} {'base ms':>9} {'base/ours':>9}"]
    lines += [f"{n:<28} {s:<40} {o:>9.4f} {b:>9.4f} {r:>9.2f}" for n, s, o, b, r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one projection, the lm_head and decode attention")
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args(argv)
    print(format_rows(bench_invariant(quick=args.quick, reps=args.reps)))


if __name__ == "__main__":
    main()
