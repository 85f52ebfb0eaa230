"""The whole linear's decode with Q(x) in the GEMM's launch (`gemm.quantize_and_gemm`, the grid quantizing the
tokens before it multiplies) against the two launches it replaces (the token quantizer, then the chain decode,
PDL between them), BF16 beside both: CUDA-graph replays, the three taking turns call by call, weights rotated
past the L2 (`bench linear`'s decode timing), `ROUNDS` rounds. Bits first: the two give the same output.

    python benchmarks/2026-12-06/s42_calls/fused_decode_ab.py [--shapes NxK,...] [--tokens 1,8,...] [--rounds R]
"""
import statistics
import sys

import torch
from torch import nn

from precision_engine.bench import linear as bench_linear
from precision_engine.bench.gemm import timed_where_they_run
from precision_engine.bench.timing import rotation
from precision_engine.numerics import linear as L
from precision_engine.numerics.linear import Fp8Linear

SHAPES = ((4096, 4096), (6144, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (12288, 4096), (4096, 12288),
          (28672, 4096))


def _arg(flag, default):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default


def two_launches(layer, x):
    """layer(x) as before this change: Q(x) in its own launch."""
    fused = L.quantize_and_gemm
    L.quantize_and_gemm = lambda *args, **kwargs: None
    try:
        return layer(x)
    finally:
        L.quantize_and_gemm = fused


def main():
    shapes = [tuple(map(int, s.split("x"))) for s in _arg("--shapes", "").split(",") if s] or SHAPES
    tokens = [int(t) for t in _arg("--tokens", "1,8,16,24,32,40,48,56,64").split(",")]
    rounds = int(_arg("--rounds", "2"))
    spec = bench_linear._specs()["fp8_bi"]
    print(f"{'N x K':>11} {'M':>3} | {'bf16 us':>8} {'two us':>8} {'one us':>8} | {'two x':>6} {'one x':>6} | "
          f"one x by round", flush=True)
    for n, k in shapes:
        for m in tokens:
            def make():
                lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
                return lin, Fp8Linear.from_linear(lin, spec[0], numerics=spec[1]), torch.randn(
                    m, k, device="cuda", dtype=torch.bfloat16)

            torch.manual_seed(n + k + m)
            sets = rotation(make, (n * k + 2 * m * (n + k)) * 2)
            with torch.no_grad():
                lin, layer, x = sets[0]
                one, two = layer(x), two_launches(layer, x)
                taken = L.quantize_and_gemm(x, spec[0].input, layer.quantized_weight()) is not None
            same = torch.equal(one.view(torch.int16), two.view(torch.int16))
            calls = {"bf16": lambda lin, layer, x: lin(x), "two": lambda lin, layer, x: two_launches(layer, x),
                     "one": lambda lin, layer, x: layer(x)}
            by_round = {name: [] for name in calls}
            with torch.no_grad():
                for _ in range(rounds):
                    turns = timed_where_they_run(calls, sets, graphed=True, warmup=5, reps=30)
                    for name, err in turns.errors.items():
                        print(f"  {name} failed: {err}", flush=True)
                    for name, ms in turns.ms.items():
                        by_round[name].append(ms)
            med = {name: statistics.median(v) * 1e3 for name, v in by_round.items() if v}
            xs = [b / o for b, o in zip(by_round["bf16"], by_round["one"])]
            print(f"{n:>5}x{k:<5} {m:>3} | {med['bf16']:8.2f} {med['two']:8.2f} {med['one']:8.2f} | "
                  f"{med['bf16'] / med['two']:6.2f} {med['bf16'] / med['one']:6.2f} | "
                  f"{min(xs):.2f}-{max(xs):.2f} {'one launch' if taken else 'NOT TAKEN'}"
                  f"{'' if same else ' BITS DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
