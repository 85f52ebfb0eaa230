"""For Nsight Compute: the shipped wgrad re-quantizer (`gluon_requant`, 1x128 along K in, 1x128 along tokens out,
transposed) beside a copy of the same bytes, three launches each (the first compiles), at 8192x4096 and 16384x4096;
with `next/order.patch` applied, in both orders.
Why: on the H200 the re-quantizer runs at 62.5-73.9% of a 1 GiB copy and 75-79.6% of a copy of its own bytes,
while on the H100 it reaches 91-93% of the latter; the cp.async ring (`../../2026-12-06/s49_calls/requant_ring.py`)
tests loads in flight; this asks the card where the rest goes (DRAM read/write split, L2 write sectors a request,
the stalls).
"""
import inspect

import torch

from precision_engine.bench.quant import requantize_bytes
from precision_engine.numerics import gluon_requant
from precision_engine.numerics import quantize as Q
from precision_engine.numerics.formats import PRESET_FORMATS

act, tok = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]
# With `next/order.patch` applied the kernel takes its programs' order: token tiles fastest, then column strips.
ORDERED = "group" in inspect.signature(gluon_requant.requantize_tokens_transposed).parameters
ORDERS = [{"group": 0}, {"group": 1}] if ORDERED else [{}]
torch.manual_seed(0)
for m, c in ((8192, 4096), (16384, 4096)):
    q = Q.quantize_rows_1xG(torch.randn(m, c, device="cuda", dtype=torch.bfloat16), act)
    half = requantize_bytes(m, c) // 2
    src, dst = (torch.empty(half, device="cuda", dtype=torch.uint8) for _ in range(2))
    for _ in range(3):
        for order in ORDERS:
            gluon_requant.requantize_tokens_transposed(q, tok, **order)
        torch.mul(src, 1, out=dst)  # a copy as a kernel (copy_ would be a memcpy, which ncu does not profile)
    torch.cuda.synchronize()
    print(f"launched {m}x{c}", flush=True)
