"""Is the ring behind a ring slow for the predecessor's footprint (programs an SM, shared memory) or its identity?
(call 3, an H100: at 16384x14336 the ring ran 80.5-80.7% of copy behind a ring and 87.9-88.2% behind the tiles or
a copy, with a 200 us or 2 ms lead alike). Pairs in turns on their own input sets, as `after_what.py`, of the s49
probe's launches of the package kernel (`requant_ring.py`): 1 or 2 programs an SM, 2 or 3 stages, the package's
one tile a program; behind a copy, a ring, or a BF16 GEMM (cuBLAS, 4096 cubed: what a backward runs between two
re-quantizations).

    PYTHONPATH=$PWD python3 benchmarks/2026-12-07/s53_calls/ring_grid.py [reps]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from precision_engine.bench.quant import copy_bandwidth, requantize_bytes
from precision_engine.bench.timing import gbps, l2_bytes, median, time_cuda_turns
from precision_engine.numerics import gluon_requant
from precision_engine.numerics import quantize as Q
from precision_engine.numerics.formats import PRESET_FORMATS

sys.path.insert(0, str(Path(__file__).parents[2] / "2026-12-06" / "s49_calls"))
import requant_ring  # noqa: E402

SHAPES = [(8192, 4096), (16384, 4096), (8192, 14336), (16384, 14336)]
PAIRS = [(first, second) for second in ("tiles", "2/SM s3", "1/SM s3", "2/SM s2")
         for first in ("copy", "gemm", second)]


def main(reps: int) -> None:
    act, tok = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]
    copy_gbps = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}; copy {copy_gbps:.0f} GB/s; % of copy of the second kernel of each pair")
    a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    fns = {"copy": lambda q, src, dst: dst.copy_(src), "gemm": lambda q, src, dst: a @ b,
           "tiles": lambda q, src, dst: gluon_requant.requantize_tokens_transposed(q, tok, ring=False)}
    for per_sm in (1, 2):
        for stages in (2, 3):
            fns[f"{per_sm}/SM s{stages}"] = (lambda q, src, dst, p=per_sm, s=stages:
                                             requant_ring.requantize_tokens_transposed(q, tok, s, p))
    for m, c in SHAPES:
        nbytes = requantize_bytes(m, c)
        n = max(6, -(-4 * l2_bytes() // (2 * nbytes)))

        def inputs():
            x = torch.randn(m, c, device="cuda", dtype=torch.bfloat16)
            return (Q.quantize_rows_1xG(x, act), torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8),
                    torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8))

        sets = [inputs() for _ in range(n)]
        for first, second in PAIRS:
            pair = [lambda i, f=fns[k], j=j: f(*sets[(2 * i + j) % n]) for j, k in enumerate((first, second))]
            times = time_cuda_turns(pair, warmup=5, reps=reps, inputs_rotation=[(i,) for i in range(n)])
            pct = 100 * gbps(nbytes, median(times[1])) / copy_gbps
            print(f"{m}x{c} | {second:<8} after {first:<8} | {pct:5.1f}")
        del sets


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
