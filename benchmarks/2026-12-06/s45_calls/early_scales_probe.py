"""Probe (forty-fifth session): the chain decode with its weight scales' global loads issued before the MMA
warpgroup's PDL wait (`ChainConfig.early_weight_scales`, `early_scales.patch` beside this file: they do not
depend on the token quantizer; the token scales still load after it), against `chain_config`'s launch. The whole
linear (Q(x), then the GEMM, as `bench linear`'s decode row) and the GEMM alone given Q(x); CUDA-graph replays in
turns with BF16, weights rotated past the L2; bits first (the change moves no bit).

    python benchmarks/2026-12-06/s45_calls/early_scales_probe.py [--shapes NxK,...] [--tokens 1,24,...]
        [--rounds R]
"""
from dataclasses import replace

import torch

from decode_probe import arg, bf16, decode_sets, gemm, launched_with, median_us, whole
from precision_engine.numerics import gluon_chain as C

SHAPES = ((4096, 4096), (6144, 4096), (1024, 4096), (4096, 14336))


def main():
    shapes = [tuple(map(int, s.split("x"))) for s in arg("--shapes", "").split(",") if s] or SHAPES
    tokens = [int(t) for t in arg("--tokens", "1,24,64").split(",")]
    rounds = int(arg("--rounds", "3"))
    shipped = C.chain_config

    def early(*args):
        return replace(shipped(*args), early_weight_scales=True)

    print(f"{'N x K':>11} {'M':>3} | {'gemm x':>7} {'early':>7} | {'whole x':>7} {'early':>7} | us: gemm, early, "
          f"whole, early (bf16)", flush=True)
    for n, k in shapes:
        for m in tokens:
            sets = decode_sets(n, k, m)
            calls = {"bf16": bf16, "gemm": gemm, "gemm_e": launched_with(early, gemm),
                     "whole": whole, "whole_e": launched_with(early, whole)}
            with torch.no_grad():
                want = whole(*sets[0]).view(torch.int16)
                same = all(torch.equal(calls[c](*sets[0]).view(torch.int16), want)
                           for c in ("gemm", "gemm_e", "whole_e"))
                us = median_us(calls, sets, rounds)
            x = {name: us["bf16"] / t for name, t in us.items()}
            print(f"{n:>5}x{k:<5} {m:>3} | {x['gemm']:7.2f} {x['gemm_e']:7.2f} | {x['whole']:7.2f} "
                  f"{x['whole_e']:7.2f} | {us['gemm']:.2f}, {us['gemm_e']:.2f}, {us['whole']:.2f}, "
                  f"{us['whole_e']:.2f} ({us['bf16']:.2f}){'' if same else ' BITS DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
