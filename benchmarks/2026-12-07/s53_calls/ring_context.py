"""The re-quantizer in a backward's own context: each program (one tile a program or the ring, in both layouts)
behind a copy of its bytes (`bench quant`'s context), behind the dgrad GEMM that precedes it in the linear's
backward (dx [M, C] = dy [M, 4096] @ W [4096, C] in BF16, whose output leaves the L2 full of written lines), and
behind itself. Pairs in turns on their own input sets, as `ring_grid.py` (the fifty-third session on an H100:
what the kernel before left in the L2 moved the ring's time by up to 20 points of copy).

    PYTHONPATH=$PWD python3 benchmarks/2026-12-07/s53_calls/ring_context.py [reps]
"""

from __future__ import annotations

import sys

import torch

from precision_engine.bench.quant import copy_bandwidth, requantize_blocks_bytes, requantize_bytes
from precision_engine.bench.timing import gbps, l2_bytes, median, time_cuda_turns
from precision_engine.numerics import gluon_requant
from precision_engine.numerics import quantize as Q
from precision_engine.numerics.formats import PRESET_FORMATS

SHAPES = [(8192, 4096), (16384, 4096), (8192, 14336), (16384, 14336)]
N_OUT = 4096  # the dgrad's reduction: the output features of the linear whose input is re-quantized


def main(reps: int) -> None:
    act, tok = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]
    blk = PRESET_FORMATS["fp8_block_weight"]
    copy_gbps = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}; copy {copy_gbps:.0f} GB/s; % of copy of each program behind: "
          f"a copy of its bytes / its dgrad / itself")
    programs = {
        "tokens tiles": (lambda q: gluon_requant.requantize_tokens_transposed(q, tok, ring=False), requantize_bytes),
        "tokens ring": (lambda q: gluon_requant.requantize_tokens_transposed(q, tok, ring=True), requantize_bytes),
        "blocks tiles": (lambda q: gluon_requant.requantize_blocks_transposed(q, blk, ring=False),
                         requantize_blocks_bytes),
        "blocks ring": (lambda q: gluon_requant.requantize_blocks_transposed(q, blk, ring=True),
                        requantize_blocks_bytes)}
    for m, c in SHAPES:
        dy = torch.randn(m, N_OUT, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N_OUT, c, device="cuda", dtype=torch.bfloat16)
        half = requantize_bytes(m, c) // 2  # the larger layout's: each copy takes its own program's bytes
        n = max(6, -(-4 * l2_bytes() // (4 * half)))

        def inputs():
            x = torch.randn(m, c, device="cuda", dtype=torch.bfloat16)
            return (Q.quantize_rows_1xG(x, act), torch.empty(half, device="cuda", dtype=torch.uint8),
                    torch.empty(half, device="cuda", dtype=torch.uint8))

        sets = [inputs() for _ in range(n)]
        for name, (fn, nbytes_of) in programs.items():
            nbytes = nbytes_of(m, c)
            before = {"copy": lambda q, src, dst, k=nbytes // 2: dst[:k].copy_(src[:k]),
                      "dgrad": lambda q, src, dst: dy @ w, "itself": lambda q, src, dst, f=fn: f(q)}
            cells = []
            for first in before.values():
                pair = [lambda i, f=first: f(*sets[(2 * i) % n]), lambda i, f=fn: f(sets[(2 * i + 1) % n][0])]
                times = time_cuda_turns(pair, warmup=5, reps=reps, inputs_rotation=[(i,) for i in range(n)])
                cells.append(f"{100 * gbps(nbytes, median(times[1])) / copy_gbps:5.1f}")
            print(f"{m}x{c} | {name:<12} | " + " / ".join(cells))
        del sets


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
