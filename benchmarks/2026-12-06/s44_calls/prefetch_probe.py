"""Probe (forty-fourth session): the chain decode with the first P K blocks of each program's weight rows sent
to L2 before its PDL wait (`ChainConfig.prefetch_kb`, `prefetch_kb.patch` beside this file), so DRAM streams
while the token quantizer runs, against `chain_config`'s launch (`p0`). `pP`: a bulk prefetch a row by the copy
engine; `lP`: a 128-byte line at a time by the load unit (`prefetch.global.L2`, `ChainConfig.prefetch_lines`),
which leaves the copy engine's queue to the ring's copies. `/qBxG` also launches the token quantizer at decode
with other programs (BLOCK_M rows x G groups a program, 4 warps, or W with `/qBxGwW`): fewer, wider ones leave
more SMs free for the GEMM's programs to start on under PDL; fewer warps, a shorter amax reduction. The whole linear (Q(x), then the GEMM, as `bench linear`'s decode row) and the
GEMM alone given Q(x), plus the quantizer alone; CUDA-graph replays in turns with BF16, weights rotated past
the L2; bits first (the prefetch moves no bit).

    python benchmarks/2026-12-06/s44_calls/prefetch_probe.py [--shapes NxK,...] [--tokens 1,24,...]
        [--variants p0,p12,l16,p0/q16x4] [--rounds R]
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
from precision_engine.numerics import triton_quant
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.quantize import quantize_rows_1xG

SHAPES = ((4096, 4096), (6144, 4096), (12288, 4096), (1024, 4096), (4096, 14336))


def _arg(flag, default):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default


def main():
    shapes = [tuple(map(int, s.split("x"))) for s in _arg("--shapes", "").split(",") if s] or SHAPES
    tokens = [int(t) for t in _arg("--tokens", "1,24,64").split(",")]
    variants = _arg("--variants", "p0,p12,p32,p0/q16x4,p32/q16x4").split(",")
    rounds = int(_arg("--rounds", "2"))
    spec = bench_linear._specs()["fp8_bi"]
    default_config = C.chain_config
    default_quant = triton_quant._ROWS_CONFIG_SMALL_M
    print(f"{'N x K':>11} {'M':>3} {'variant':>10} | {'gemm x':>7} {'whole x':>7} | gemm us, whole us "
          f"(bf16 us, quant us)", flush=True)
    for n, k in shapes:
        for m in tokens:
            def make():
                lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
                layer = Fp8Linear.from_linear(lin, spec[0], numerics=spec[1])
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                return lin, layer, x, quantize_rows_1xG(x, spec[0].input), layer.quantized_weight()

            torch.manual_seed(n + k + m)
            sets = rotation(make, (n * k + 2 * m * (n + k)) * 2)

            def patched(variant, fn):
                prefetch, _, quant = variant.partition("/")
                p = int(prefetch[1:])
                shape, _, warps = quant[1:].partition("w")
                rows, groups = map(int, shape.split("x")) if quant else (None, None)

                def call(*args):
                    C.chain_config = lambda *a: replace(default_config(*a), prefetch_kb=p,
                                                        prefetch_lines=prefetch[0] == "l")
                    if quant:
                        triton_quant._ROWS_CONFIG_SMALL_M = {"BLOCK_M": rows, "GROUPS": groups,
                                                             "num_warps": int(warps or 4)}
                    try:
                        return fn(*args)
                    finally:
                        C.chain_config = default_config
                        triton_quant._ROWS_CONFIG_SMALL_M = default_quant
                return call

            def gemm(lin, layer, x, xq, wq):
                return C.gluon_chain_decode_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128)

            def whole(lin, layer, x, xq, wq):
                return layer(x)

            with torch.no_grad():
                want = whole(*sets[0])
                bits = {v: torch.equal(patched(v, whole)(*sets[0]).view(torch.int16), want.view(torch.int16))
                        and torch.equal(patched(v, gemm)(*sets[0]).view(torch.int16), want.view(torch.int16))
                        for v in variants}
            calls = {"bf16": lambda lin, layer, x, xq, wq: lin(x),
                     "quant": lambda lin, layer, x, xq, wq: quantize_rows_1xG(x, spec[0].input).data}
            for v in variants:
                if "/" not in v:  # the quantizer's launch does not touch the GEMM alone
                    calls[f"{v}:gemm"] = patched(v, gemm)
                calls[f"{v}:whole"] = patched(v, whole)
            by_round = {name: [] for name in calls}
            with torch.no_grad():
                for _ in range(rounds):
                    turns = timed_where_they_run(calls, sets, graphed=True, warmup=5, reps=30)
                    for name, err in turns.errors.items():
                        print(f"  {name} failed: {str(err)[:200]}", flush=True)
                    for name, ms in turns.ms.items():
                        by_round[name].append(ms)
            med = {name: statistics.median(v) * 1e3 for name, v in by_round.items() if v}
            for v in variants:
                if f"{v}:whole" not in med:
                    continue
                g, w = med.get(f"{v.partition('/')[0]}:gemm", float("nan")), med[f"{v}:whole"]
                print(f"{n:>5}x{k:<5} {m:>3} {v:>10} | {med['bf16'] / g:7.2f} {med['bf16'] / w:7.2f} | "
                      f"{g:.2f}, {w:.2f} ({med['bf16']:.2f}, {med['quant']:.2f})"
                      f"{'' if bits[v] else ' BITS DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
