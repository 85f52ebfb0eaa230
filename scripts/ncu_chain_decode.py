"""Launch the chain decode (`gluon_chain`: AUTO's narrow weights at M <= 64) at M = 1, 16 and 64 on the 4096x4096
and 4096x14336 weights, twice each, for Nsight Compute to profile: where a narrow weight's decode GEMM loses
its time to the weight's stream (issue 12's decode rows). Not part of the package: a device-call tool.

    ncu --clock-control none -k regex:_gluon_chain --metrics <stall and throughput metrics> \
        python3 scripts/ncu_chain_decode.py
"""

import torch

from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.gluon_chain import gluon_chain_decode_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

torch.manual_seed(0)
for n, k in ((4096, 4096), (4096, 14336)):
    wq = quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02, P["fp8_block_weight"])
    for m in (1, 16, 64):
        xq = quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), P["fp8_group_act"])
        for _ in range(2):
            gluon_chain_decode_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128)
        torch.cuda.synchronize()
        print(f"launched {n}x{k} M={m}", flush=True)
