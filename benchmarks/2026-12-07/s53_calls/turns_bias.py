"""Does timing in turns on shared inputs flatter the kernels that run later in a turn?

Call 0 (an H100) timed the package's ring (`gluon_requant`, ring=True) with `precision bench quant`, one row after
another, at 73.7 / 74.6 / 77.9 / 80.8% of copy against one tile a program's 77.2 / 85.6 / 88.8 / 90.1%. The s49
probe (`requant_ring.py bench`), whose SASS is this kernel's, had timed it in turns on the same card at 74.5 /
82.3 / 84.8 / 86.9% against 75.4 / 82.7 / 87.9 / 89.4%. In the probe's turns every function reads the same input
set, the ring right after the shipped kernel; the s51 order probe, timed so, also led where `bench quant` found
nothing. This times the same three functions (a copy of the same bytes, one tile a program, the ring) four ways:

  shared, ring last   the probe's way: each turn's functions read one input set, the ring after the tiles
  shared, ring first  the same, the ring before the tiles
  own sets            in turns, each call on the next input set (no call reads bytes the last five calls read)
  one after another   `bench quant`'s way: time_cuda, a function's repetitions together

    PYTHONPATH=$PWD python3 benchmarks/2026-12-07/s53_calls/turns_bias.py [reps]
"""

from __future__ import annotations

import sys

import torch

from precision_engine.bench.quant import copy_bandwidth, requantize_bytes
from precision_engine.bench.timing import gbps, l2_bytes, median, time_cuda, time_cuda_turns
from precision_engine.numerics import gluon_requant
from precision_engine.numerics import quantize as Q
from precision_engine.numerics.formats import PRESET_FORMATS

SHAPES = [(8192, 4096), (16384, 4096), (8192, 14336), (16384, 14336)]


def main(reps: int) -> None:
    act, tok = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]
    copy_gbps = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}; copy {copy_gbps:.0f} GB/s; "
          f"L2 {l2_bytes() >> 20} MiB; % of copy (of a copy of the same bytes)")
    fns = {"copy": lambda q, src, dst: dst.copy_(src),
           "tiles": lambda q, src, dst: gluon_requant.requantize_tokens_transposed(q, tok, ring=False),
           "ring": lambda q, src, dst: gluon_requant.requantize_tokens_transposed(q, tok, ring=True)}
    for m, c in SHAPES:
        nbytes = requantize_bytes(m, c)
        n = max(6, -(-4 * l2_bytes() // (2 * nbytes)))  # own sets: call p of the run reads set p % n

        def inputs():
            x = torch.randn(m, c, device="cuda", dtype=torch.bfloat16)
            return (Q.quantize_rows_1xG(x, act), torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8),
                    torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8))

        sets = [inputs() for _ in range(n)]
        ways = {}
        for way, order in (("shared, ring last", ("copy", "tiles", "ring")),
                           ("shared, ring first", ("copy", "ring", "tiles"))):
            times = time_cuda_turns([fns[k] for k in order], warmup=5, reps=reps, inputs_rotation=sets)
            ways[way] = dict(zip(order, map(median, times)))
        own = [lambda i, f=fns[k], j=j: f(*sets[(3 * i + j) % n]) for j, k in enumerate(fns)]
        times = time_cuda_turns(own, warmup=5, reps=reps, inputs_rotation=[(i,) for i in range(n)])
        ways["own sets"] = dict(zip(fns, map(median, times)))
        ways["one after another"] = {k: median(time_cuda(f, warmup=5, reps=reps, inputs_rotation=sets))
                                     for k, f in fns.items()}
        del sets
        for way, ms in ways.items():
            cells = "  ".join(f"{k} {100 * gbps(nbytes, ms[k]) / copy_gbps:5.1f} ({100 * ms['copy'] / ms[k]:5.1f})"
                              for k in ("tiles", "ring"))
            print(f"{m}x{c} | {way:<18} | copy {100 * gbps(nbytes, ms['copy']) / copy_gbps:5.1f} | {cells}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
