"""Probe (forty-fifth session): the chain decode with `chain_config`'s launch changed field by field, against the
shipped one. A variant is `field=value` pairs joined by `+` (e.g. `stages=20`, `stages=24+trip=8`), applied to
every launch chain_config gives, or only to its narrow-weight launches (weight_rows > 0) with a leading `n:`.
The whole linear (Q(x), then the GEMM, as `bench linear`'s decode row) and the GEMM alone given Q(x); CUDA-graph
replays in turns with BF16, weights rotated past the L2, medians over rounds; bits first (ChainConfig is
numerics-neutral).

    python benchmarks/2026-12-06/s45_calls/config_probe.py --variants n:stages=16,n:stages=24 [--shapes NxK,...]
        [--tokens 1,24,...] [--rounds R]
"""
from dataclasses import replace

import torch

from decode_probe import arg, bf16, decode_sets, gemm, launched_with, median_us, whole
from precision_engine.numerics import gluon_chain as C


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
    shapes = [tuple(map(int, s.split("x"))) for s in arg("--shapes", "1024x4096,4096x4096").split(",")]
    tokens = [int(t) for t in arg("--tokens", "1,24,64").split(",")]
    variants = arg("--variants", "n:stages=16,n:stages=24").split(",")
    rounds = int(arg("--rounds", "3"))
    shipped = C.chain_config
    configs = {v: _changed(v) for v in variants}
    print(f"{'N x K':>11} {'M':>3} {'variant':>22} | {'gemm x':>7} {'whole x':>7} | gemm us, whole us (bf16 us); "
          f"shipped launch: {{config}}", flush=True)
    for n, k in shapes:
        for m in tokens:
            sets = decode_sets(n, k, m)
            calls = {"bf16": bf16, "shipped:gemm": gemm, "shipped:whole": whole}
            for v, config in configs.items():
                calls |= {f"{v}:gemm": launched_with(config, gemm), f"{v}:whole": launched_with(config, whole)}
            with torch.no_grad():
                want = whole(*sets[0]).view(torch.int16)
                bits = {v: all(torch.equal(calls[f"{v}:{part}"](*sets[0]).view(torch.int16), want)
                               for part in ("gemm", "whole")) for v in ("shipped", *variants)}
                us = median_us(calls, sets, rounds)
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
