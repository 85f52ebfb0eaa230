"""Probe (forty-fifth session): the chain decode with `chain_config`'s launch changed field by field, against the
shipped one. A variant is `field=value` pairs joined by `+` (e.g. `stages=20`, `stages=24+trip=8`), applied to
every launch chain_config gives, or only to its narrow-weight launches (weight_rows > 0) with a leading `n:`.
The whole linear (Q(x), then the GEMM, as `bench linear`'s decode row) and the GEMM alone given Q(x); CUDA-graph
replays in turns with BF16, weights rotated past the L2, medians over rounds; bits first (ChainConfig is
numerics-neutral).

    python benchmarks/2026-12-06/s45_calls/config_probe.py --variants n:stages=16,n:stages=24 [--shapes NxK,...]
        [--tokens 1,24,...] [--rounds R]
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


def _arg(flag, default):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default


def _changed(variant: str):
    """chain_config with `variant`'s fields set."""
    narrow_only, _, fields = variant.rpartition(":")
    values = {name: int(value) for name, value in (pair.split("=") for pair in fields.split("+"))}
    shipped = C.chain_config

    def config(*args):
        base = shipped(*args)
        return replace(base, **values) if base.weight_rows or not narrow_only else base
    return config


def main():
    shapes = [tuple(map(int, s.split("x"))) for s in _arg("--shapes", "1024x4096,4096x4096").split(",")]
    tokens = [int(t) for t in _arg("--tokens", "1,24,64").split(",")]
    variants = _arg("--variants", "n:stages=16,n:stages=24").split(",")
    rounds = int(_arg("--rounds", "3"))
    spec = bench_linear._specs()["fp8_bi"]
    shipped = C.chain_config
    print(f"{'N x K':>11} {'M':>3} {'variant':>22} | {'gemm x':>7} {'whole x':>7} | gemm us, whole us (bf16 us); "
          f"shipped launch: {{config}}", flush=True)
    for n, k in shapes:
        for m in tokens:
            def make():
                lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
                layer = Fp8Linear.from_linear(lin, spec[0], numerics=spec[1])
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                return lin, layer, x, quantize_rows_1xG(x, spec[0].input), layer.quantized_weight()

            torch.manual_seed(n + k + m)
            sets = rotation(make, (n * k + 2 * m * (n + k)) * 2)

            def under(variant, fn):
                def call(*args):
                    C.chain_config = _changed(variant)
                    try:
                        return fn(*args)
                    finally:
                        C.chain_config = shipped
                return call

            def gemm(lin, layer, x, xq, wq):
                return C.gluon_chain_decode_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128)

            def whole(lin, layer, x, xq, wq):
                return layer(x)

            calls = {"bf16": lambda lin, layer, x, xq, wq: lin(x), "shipped:gemm": gemm, "shipped:whole": whole}
            for v in variants:
                calls |= {f"{v}:gemm": under(v, gemm), f"{v}:whole": under(v, whole)}
            by_round = {name: [] for name in calls}
            with torch.no_grad():
                want = whole(*sets[0]).view(torch.int16)
                bits = {v: all(torch.equal(calls[f"{v}:{part}"](*sets[0]).view(torch.int16), want)
                               for part in ("gemm", "whole")) for v in ("shipped", *variants)}
                for _ in range(rounds):
                    turns = timed_where_they_run(calls, sets, graphed=True, warmup=5, reps=30)
                    for name, err in turns.errors.items():
                        print(f"  {name} failed: {str(err)[:200]}", flush=True)
                    for name, ms in turns.ms.items():
                        by_round[name].append(ms)
            us = {name: statistics.median(v) * 1e3 for name, v in by_round.items() if v}
            launch = shipped(m, n, k, torch.cuda.get_device_properties(0).multi_processor_count)
            for v in ("shipped", *variants):
                if f"{v}:whole" not in us:
                    continue
                g, w = us.get(f"{v}:gemm", float("nan")), us[f"{v}:whole"]
                print(f"{n:>5}x{k:<5} {m:>3} {v:>22} | {us['bf16'] / g:7.2f} {us['bf16'] / w:7.2f} | {g:.2f}, "
                      f"{w:.2f} ({us['bf16']:.2f}){'' if bits[v] else ' BITS DIFFER'}"
                      f"{'; ' + str(launch) if v == 'shipped' else ''}", flush=True)


if __name__ == "__main__":
    main()
