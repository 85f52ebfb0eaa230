"""What the forty-fifth session's decode probes share: fp8_bi's decode inputs drawn as `bench linear` draws them,
each set with Q(x) and the quantized weight for the GEMM alone; a call run under another chain_config; and rounds
of CUDA-graph replays in turns, as medians in us."""
import statistics
import sys
from collections.abc import Callable

import torch

from precision_engine.bench import linear as bench_linear
from precision_engine.bench.gemm import timed_where_they_run
from precision_engine.numerics import gluon_chain as C
from precision_engine.numerics.quantize import quantize_rows_1xG


def arg(flag: str, default: str) -> str:
    """The value after `flag` on the command line, else `default`."""
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default


def decode_sets(n: int, k: int, m: int, device: str = "cuda") -> list[tuple]:
    """(BF16 Linear, its fp8_bi layer, x, Q(x), quantized weight) sets rotated past the L2
    (`bench.linear._input_sets`, seeded n + k + m)."""
    spec = bench_linear._specs()["fp8_bi"][0]
    sets = bench_linear._input_sets(n, k, m, ["fp8_bi"], seed=n + k + m, device=device)
    return [(layers["bf16"], layers["fp8_bi"], x, quantize_rows_1xG(x, spec.input),
             layers["fp8_bi"].quantized_weight()) for layers, x, _ in sets]


def gemm(lin, layer, x, xq, wq):
    """The chain decode GEMM alone, given Q(x)."""
    return C.gluon_chain_decode_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128)


def whole(lin, layer, x, xq, wq):
    """The whole linear: Q(x), then the GEMM."""
    return layer(x)


def bf16(lin, layer, x, xq, wq):
    return lin(x)


def launched_with(config: Callable, fn: Callable) -> Callable:
    """`fn` with `gluon_chain.chain_config` replaced by `config` while it runs (and is captured)."""
    def call(*args):
        shipped = C.chain_config
        C.chain_config = config
        try:
            return fn(*args)
        finally:
            C.chain_config = shipped
    return call


def median_us(calls: dict, sets: list[tuple], rounds: int) -> dict:
    """Each call's median over `rounds` rounds of CUDA-graph replays in turns (5 warm-up, 30 timed), in us; a call
    that fails is named and left out."""
    by_round = {name: [] for name in calls}
    for _ in range(rounds):
        turns = timed_where_they_run(calls, sets, graphed=True, warmup=5, reps=30)
        for name, err in turns.errors.items():
            print(f"  {name} failed: {str(err)[:200]}", flush=True)
        for name, ms in turns.ms.items():
            by_round[name].append(ms)
    return {name: statistics.median(v) * 1e3 for name, v in by_round.items() if v}
