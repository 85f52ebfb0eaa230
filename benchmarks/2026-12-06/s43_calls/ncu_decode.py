"""For Nsight Compute: the whole linear's decode, BF16's GEMM (cuBLAS, through F.linear) and ours (the token
quantizer, then the chain decode), each launched three times (the first compiles), on the shapes of argv[1]
(default 4096x4096,6144x4096) at M = 1, 24 and 64. The forty-second session's `ncu_decode_vs_bf16.py` with shapes
(issue 12's short decode rows: BF16 speeds up above 16 tokens, ours does not).
"""
import sys

import torch
import torch.nn.functional as F

from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

torch.manual_seed(0)
for shape in (sys.argv[1] if len(sys.argv) > 1 else "4096x4096,6144x4096").split(","):
    n, k = map(int, shape.split("x"))
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    wq = quantize_blocks(w, P["fp8_block_weight"])
    for m in (1, 24, 64):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            F.linear(x, w)
            fp8_gemm(quantize_rows_1xG(x, P["fp8_group_act"]), wq)
        torch.cuda.synchronize()
        print(f"launched {shape} M={m}", flush=True)
