"""Probe (forty-fifth session): how much of what the token quantizer costs the whole linear's decode (whole minus
the GEMM alone: 0.9-1.4 us on the H100, forty-fourth session) is its read of x from DRAM. `bench linear`'s decode
rows rotate x past the L2 with the weight; in a decoder x was just written by the op before the linear, so it
sits in the L2. Each call here runs once as is (x cold) and once after an in-place `x.mul_(1)` (x exact, now in
the L2: "hot"), for BF16, the GEMM alone given Q(x) and the whole linear; CUDA-graph replays in turns, weights
rotated past the L2, medians over rounds. A diagnostic: the measured rows keep x cold.

    python benchmarks/2026-12-06/s45_calls/hot_x_probe.py [--shapes NxK,...] [--tokens 1,24,...] [--rounds R]
"""
import torch

from decode_probe import arg, bf16, decode_sets, gemm, median_us, whole

SHAPES = ((4096, 4096), (6144, 4096), (1024, 4096), (4096, 14336))


def hot(fn):
    """`fn` after an in-place `x.mul_(1)`: x unchanged, and in the L2."""
    def call(lin, layer, x, xq, wq):
        x.mul_(1)
        return fn(lin, layer, x, xq, wq)
    return call


def main():
    shapes = [tuple(map(int, s.split("x"))) for s in arg("--shapes", "").split(",") if s] or SHAPES
    tokens = [int(t) for t in arg("--tokens", "1,24,64").split(",")]
    rounds = int(arg("--rounds", "3"))
    print(f"{'N x K':>11} {'M':>3} | cold: {'whole x':>7} whole-gemm us | hot: {'whole x':>7} whole-gemm us | "
          f"us cold/hot: bf16, gemm, whole", flush=True)
    for n, k in shapes:
        for m in tokens:
            sets = decode_sets(n, k, m)
            plain = {"bf16": bf16, "gemm": gemm, "whole": whole}
            calls = plain | {f"{name}_hot": hot(fn) for name, fn in plain.items()}
            with torch.no_grad():
                same = torch.equal(calls["whole_hot"](*sets[0]).view(torch.int16),
                                   plain["whole"](*sets[0]).view(torch.int16))
                us = median_us(calls, sets, rounds)
            cold_x, hot_x = us["bf16"] / us["whole"], us["bf16_hot"] / us["whole_hot"]
            print(f"{n:>5}x{k:<5} {m:>3} | cold: {cold_x:7.2f} {us['whole'] - us['gemm']:12.2f} | hot: {hot_x:7.2f} "
                  f"{us['whole_hot'] - us['gemm_hot']:12.2f} | {us['bf16']:.2f}/{us['bf16_hot']:.2f}, "
                  f"{us['gemm']:.2f}/{us['gemm_hot']:.2f}, {us['whole']:.2f}/{us['whole_hot']:.2f}"
                  f"{'' if same else ' BITS DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
