"""Probe (forty-fifth session): the chain decode with its weight scales' global loads issued before the MMA
warpgroup's PDL wait (`ChainConfig.early_weight_scales`, `early_scales.patch` beside this file: they do not
depend on the token quantizer; the token scales still load after it), against `chain_config`'s launch. The whole
linear (Q(x), then the GEMM, as `bench linear`'s decode row) and the GEMM alone given Q(x); CUDA-graph replays in
turns with BF16, weights rotated past the L2; bits first (the change moves no bit).

    python benchmarks/2026-12-06/s45_calls/early_scales_probe.py [--shapes NxK,...] [--tokens 1,24,...]
        [--rounds R]
"""
import statistics
import sys
from dataclasses import replace

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
    default_config = C.chain_config
    print(f"{'N x K':>11} {'M':>3} | {'gemm x':>7} {'early':>7} | {'whole x':>7} {'early':>7} | us: gemm, early, "
          f"whole, early (bf16)", flush=True)
    for n, k in shapes:
        for m in tokens:
            def make():
                lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
                layer = Fp8Linear.from_linear(lin, spec[0], numerics=spec[1])
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                return lin, layer, x, quantize_rows_1xG(x, spec[0].input), layer.quantized_weight()

            torch.manual_seed(n + k + m)
            sets = rotation(make, (n * k + 2 * m * (n + k)) * 2)

            def early(fn):
                def call(*args):
                    C.chain_config = lambda *a: replace(default_config(*a), early_weight_scales=True)
                    try:
                        return fn(*args)
                    finally:
                        C.chain_config = default_config
                return call

            def gemm(lin, layer, x, xq, wq):
                return C.gluon_chain_decode_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128)

            def whole(lin, layer, x, xq, wq):
                return layer(x)

            calls = {"bf16": lambda lin, layer, x, xq, wq: lin(x), "gemm": gemm, "gemm_e": early(gemm),
                     "whole": whole, "whole_e": early(whole)}
            with torch.no_grad():
                want = whole(*sets[0]).view(torch.int16)
                same = all(torch.equal(calls[c](*sets[0]).view(torch.int16), want)
                           for c in ("gemm", "gemm_e", "whole_e"))
                by_round = {name: [] for name in calls}
                for _ in range(rounds):
                    turns = timed_where_they_run(calls, sets, graphed=True, warmup=5, reps=30)
                    for name, err in turns.errors.items():
                        print(f"  {name} failed: {str(err)[:200]}", flush=True)
                    for name, ms in turns.ms.items():
                        by_round[name].append(ms)
            us = {name: statistics.median(v) * 1e3 for name, v in by_round.items() if v}
            x = {name: us["bf16"] / t for name, t in us.items()}
            print(f"{n:>5}x{k:<5} {m:>3} | {x['gemm']:7.2f} {x['gemm_e']:7.2f} | {x['whole']:7.2f} "
                  f"{x['whole_e']:7.2f} | {us['gemm']:.2f}, {us['gemm_e']:.2f}, {us['whole']:.2f}, "
                  f"{us['whole_e']:.2f} ({us['bf16']:.2f}){'' if same else ' BITS DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
