"""What slows the ring when it follows itself? (call 2: one ring after another ran 7-9 points of copy below the
ring in turns behind the copy or the tiles, on an H100; the tiles kept their speed). Each row times, in turns on
their own input sets (call p reads set p % n), a kernel behind a given predecessor, with the GPU's lead before
each timed call (its spin) 200 us or 2 ms: whether it is what ran before, or how recently.

    PYTHONPATH=$PWD python3 benchmarks/2026-12-07/s53_calls/after_what.py [reps]
"""

from __future__ import annotations

import sys

import torch

from precision_engine.bench.quant import copy_bandwidth, requantize_bytes
from precision_engine.bench.timing import gbps, l2_bytes, median, time_cuda_turns
from precision_engine.numerics import gluon_requant
from precision_engine.numerics import quantize as Q
from precision_engine.numerics.formats import PRESET_FORMATS

SHAPES = [(8192, 4096), (16384, 14336)]


def main(reps: int) -> None:
    act, tok = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]
    copy_gbps = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}; copy {copy_gbps:.0f} GB/s; % of copy of the second kernel of each pair")
    fns = {"copy": lambda q, src, dst: dst.copy_(src),
           "tiles": lambda q, src, dst: gluon_requant.requantize_tokens_transposed(q, tok, ring=False),
           "ring": lambda q, src, dst: gluon_requant.requantize_tokens_transposed(q, tok, ring=True)}
    for m, c in SHAPES:
        nbytes = requantize_bytes(m, c)
        n = max(6, -(-4 * l2_bytes() // (2 * nbytes)))

        def inputs():
            x = torch.randn(m, c, device="cuda", dtype=torch.bfloat16)
            return (Q.quantize_rows_1xG(x, act), torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8),
                    torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8))

        sets = [inputs() for _ in range(n)]
        for lead in (200.0, 2000.0):
            for first, second in (("ring", "ring"), ("tiles", "ring"), ("copy", "ring"), ("ring", "tiles"),
                                  ("tiles", "tiles"), ("copy", "tiles")):
                pair = [lambda i, f=fns[k], j=j: f(*sets[(2 * i + j) % n]) for j, k in enumerate((first, second))]
                times = time_cuda_turns(pair, warmup=5, reps=reps, inputs_rotation=[(i,) for i in range(n)],
                                        host_lead_us=lead)
                pct = 100 * gbps(nbytes, median(times[1])) / copy_gbps
                print(f"{m}x{c} | lead {lead:6.0f} us | {second:<5} after {first:<5} | {pct:5.1f}")
        del sets


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
