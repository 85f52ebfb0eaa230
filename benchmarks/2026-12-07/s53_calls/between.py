"""What between two rings clears the slowdown? (calls 3-5, an H100: the ring behind a ring ran 6-9 points of copy
lower than behind a copy, a GEMM or the one-tile program; a 2 ms idle gap did not help.) Pairs in turns, as
`ring_grid.py`: a kernel X, then the ring (AUTO's program on the H200), so consecutive rings have X between them.
X touches every SM with little DRAM traffic (a 4 MB multiply in place, L2-resident), reads 256 MB (a sum: no
written lines left in the L2), writes 256 MB (a fill), or is a copy / a ring (the known ends).

    PYTHONPATH=$PWD python3 benchmarks/2026-12-07/s53_calls/between.py [reps]
"""

from __future__ import annotations

import sys

import torch

from precision_engine.bench.quant import copy_bandwidth, requantize_bytes
from precision_engine.bench.timing import gbps, l2_bytes, median, time_cuda_turns
from precision_engine.numerics import gluon_requant
from precision_engine.numerics import quantize as Q
from precision_engine.numerics.formats import PRESET_FORMATS

SHAPES = [(16384, 4096), (16384, 14336)]


def main(reps: int) -> None:
    act, tok = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]
    copy_gbps = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}; copy {copy_gbps:.0f} GB/s; % of copy of the ring behind each kernel")
    small = torch.randn(1 << 20, device="cuda")
    big = torch.randn(1 << 26, device="cuda")
    fns = {"4 MB in place": lambda q, src, dst: small.mul_(1.0), "read 256 MB": lambda q, src, dst: big.sum(),
           "write 256 MB": lambda q, src, dst: big.fill_(1.0), "copy": lambda q, src, dst: dst.copy_(src),
           "ring": lambda q, src, dst: gluon_requant.requantize_tokens_transposed(q, tok, ring=True),
           "tiles": lambda q, src, dst: gluon_requant.requantize_tokens_transposed(q, tok, ring=False)}
    for m, c in SHAPES:
        nbytes = requantize_bytes(m, c)
        n = max(6, -(-4 * l2_bytes() // (2 * nbytes)))

        def inputs():
            x = torch.randn(m, c, device="cuda", dtype=torch.bfloat16)
            return (Q.quantize_rows_1xG(x, act), torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8),
                    torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8))

        sets = [inputs() for _ in range(n)]
        for first in fns:
            pair = [lambda i, f=fns[k], j=j: f(*sets[(2 * i + j) % n]) for j, k in enumerate((first, "ring"))]
            times = time_cuda_turns(pair, warmup=5, reps=reps, inputs_rotation=[(i,) for i in range(n)])
            print(f"{m}x{c} | ring behind {first:<13} | {100 * gbps(nbytes, median(times[1])) / copy_gbps:5.1f}")
        del sets


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
