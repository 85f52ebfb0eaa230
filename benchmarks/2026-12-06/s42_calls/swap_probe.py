"""Probe (forty-second session): the chain decode at M <= 32 with its weight tiles on wgmma's narrow side, the
fewest rows a program that fit one wave (`ChainConfig.weight_rows`, what `chain_config` gives above 32 tokens:
4096 rows -> 128 programs of 32 instead of 64 programs of 64), against `chain_config`'s launch. The twenty-third
session found 32-row tiles slower at M = 32 before tiles landed in pieces (a 64-row token box half past the
tokens, zero-filled); not re-timed since. GEMM alone and the whole linear (Q(x), then the GEMM, as `bench
linear`'s decode row), CUDA-graph replays in turns with BF16, weights rotated past the L2; bits first.

    python benchmarks/2026-12-06/s42_calls/swap_probe.py [--shapes NxK,...] [--tokens 1,8,...] [--rounds R]
"""
import statistics
import sys

import torch
import triton
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


def fitted(n, sms):
    return triton.cdiv(triton.cdiv(n, sms), C.GRAIN.value) * C.GRAIN.value


def main():
    shapes = [tuple(map(int, s.split("x"))) for s in _arg("--shapes", "").split(",") if s] or SHAPES
    tokens = [int(t) for t in _arg("--tokens", "1,8,16,24,32").split(",")]
    rounds = int(_arg("--rounds", "2"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    spec = bench_linear._specs()["fp8_bi"]
    default_config = C.chain_config
    print(f"{'N x K':>11} {'M':>3} {'variant':>10} | {'gemm x':>7} {'whole x':>7} | gemm us, whole us (bf16 us)",
          flush=True)
    for n, k in shapes:
        rows = fitted(n, sms)
        variants = {"default": None, "fit": C.ChainConfig(stages=12, trip=4, ahead=3, weight_rows=rows)}
        for m in tokens:
            def make():
                lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
                layer = Fp8Linear.from_linear(lin, spec[0], numerics=spec[1])
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                return lin, layer, x, quantize_rows_1xG(x, spec[0].input), layer.quantized_weight()

            torch.manual_seed(n + k + m)
            sets = rotation(make, (n * k + 2 * m * (n + k)) * 2)

            def gemm(cfg):
                return lambda lin, layer, x, xq, wq: C.gluon_chain_decode_gemm(
                    xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=cfg)

            def whole(cfg):
                def call(lin, layer, x, xq, wq):
                    C.chain_config = (lambda *a: cfg) if cfg else default_config
                    try:
                        return layer(x)
                    finally:
                        C.chain_config = default_config
                return call

            want = gemm(None)(*sets[0])
            bits = {name: torch.equal(gemm(cfg)(*sets[0]).view(torch.int16), want.view(torch.int16))
                    for name, cfg in variants.items()}
            calls = {"bf16": lambda lin, layer, x, xq, wq: lin(x)}
            for name, cfg in variants.items():
                calls[f"{name}/gemm"] = gemm(cfg)
                calls[f"{name}/whole"] = whole(cfg)
            by_round = {name: [] for name in calls}
            with torch.no_grad():
                for _ in range(rounds):
                    turns = timed_where_they_run(calls, sets, graphed=True, warmup=5, reps=30)
                    for name, err in turns.errors.items():
                        print(f"  {name} failed: {str(err)[:200]}", flush=True)
                    for name, ms in turns.ms.items():
                        by_round[name].append(ms)
            med = {name: statistics.median(v) * 1e3 for name, v in by_round.items() if v}
            for name in variants:
                if f"{name}/gemm" not in med:
                    continue
                g, w = med[f"{name}/gemm"], med[f"{name}/whole"]
                print(f"{n:>5}x{k:<5} {m:>3} {name:>10} | {med['bf16'] / g:7.2f} {med['bf16'] / w:7.2f} | "
                      f"{g:.2f}, {w:.2f} ({med['bf16']:.2f}){'' if bits[name] else ' BITS DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
