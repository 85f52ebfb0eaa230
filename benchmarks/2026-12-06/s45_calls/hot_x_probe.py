"""Probe (forty-fifth session): how much of what the token quantizer costs the whole linear's decode (whole minus
the GEMM alone: 0.9-1.4 us on the H100, forty-fourth session) is its read of x from DRAM. `bench linear`'s decode
rows rotate x past the L2 with the weight; in a decoder x was just written by the op before the linear, so it
sits in the L2. Each call here runs once as is (x cold) and once after an in-place `x.mul_(1)` (x exact, now in
the L2: "hot"), for BF16, the GEMM alone given Q(x) and the whole linear; CUDA-graph replays in turns, weights
rotated past the L2, medians over rounds. A diagnostic: the measured rows keep x cold.

    python benchmarks/2026-12-06/s45_calls/hot_x_probe.py [--shapes NxK,...] [--tokens 1,24,...] [--rounds R]
"""
import statistics
import sys

import torch
from torch import nn

from precision_engine.bench import linear as bench_linear
from precision_engine.bench.gemm import timed_where_they_run
from precision_engine.bench.timing import rotation
from precision_engine.numerics import gluon_chain as C
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.quantize import quantize_rows_1xG

SHAPES = ((4096, 4096), (6144, 4096), (1024, 4096), (4096, 14336))


def _arg(flag, default):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default


def main():
    shapes = [tuple(map(int, s.split("x"))) for s in _arg("--shapes", "").split(",") if s] or SHAPES
    tokens = [int(t) for t in _arg("--tokens", "1,24,64").split(",")]
    rounds = int(_arg("--rounds", "3"))
    spec = bench_linear._specs()["fp8_bi"]
    print(f"{'N x K':>11} {'M':>3} | cold: {'whole x':>7} whole-gemm us | hot: {'whole x':>7} whole-gemm us | "
          f"us cold/hot: bf16, gemm, whole", flush=True)
    for n, k in shapes:
        for m in tokens:
            def make():
                lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
                layer = Fp8Linear.from_linear(lin, spec[0], numerics=spec[1])
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                return lin, layer, x, quantize_rows_1xG(x, spec[0].input), layer.quantized_weight()

            torch.manual_seed(n + k + m)
            sets = rotation(make, (n * k + 2 * m * (n + k)) * 2)
            plain = {"bf16": lambda lin, layer, x, xq, wq: lin(x),
                     "gemm": lambda lin, layer, x, xq, wq: C.gluon_chain_decode_gemm(
                         xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128),
                     "whole": lambda lin, layer, x, xq, wq: layer(x)}

            def hot(fn):
                def call(lin, layer, x, xq, wq):
                    x.mul_(1)
                    return fn(lin, layer, x, xq, wq)
                return call

            calls = plain | {f"{name}_hot": hot(fn) for name, fn in plain.items()}
            with torch.no_grad():
                same = torch.equal(calls["whole_hot"](*sets[0]).view(torch.int16),
                                   plain["whole"](*sets[0]).view(torch.int16))
                by_round = {name: [] for name in calls}
                for _ in range(rounds):
                    turns = timed_where_they_run(calls, sets, graphed=True, warmup=5, reps=30)
                    for name, err in turns.errors.items():
                        print(f"  {name} failed: {str(err)[:200]}", flush=True)
                    for name, ms in turns.ms.items():
                        by_round[name].append(ms)
            us = {name: statistics.median(v) * 1e3 for name, v in by_round.items() if v}
            cold_x, hot_x = us["bf16"] / us["whole"], us["bf16_hot"] / us["whole_hot"]
            print(f"{n:>5}x{k:<5} {m:>3} | cold: {cold_x:7.2f} {us['whole'] - us['gemm']:12.2f} | hot: {hot_x:7.2f} "
                  f"{us['whole_hot'] - us['gemm_hot']:12.2f} | {us['bf16']:.2f}/{us['bf16_hot']:.2f}, "
                  f"{us['gemm']:.2f}/{us['gemm_hot']:.2f}, {us['whole']:.2f}/{us['whole_hot']:.2f}"
                  f"{'' if same else ' BITS DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
