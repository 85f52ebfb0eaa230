"""For Nsight Compute: the whole linear's decode on 4096x4096 at M = 1, 24 and 64, BF16's GEMM (cuBLAS, through
F.linear) and ours (the token quantizer, then the chain decode), each launched twice after a warm-up, so that
their kernel durations and DRAM throughput sit side by side (issue 12's short decode rows: BF16 speeds up above 16
tokens, ours does not).

    ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,\
        dram__throughput.avg.pct_of_peak_sustained_elapsed python3 ncu_decode_vs_bf16.py
"""
import torch
import torch.nn.functional as F

from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

torch.manual_seed(0)
n = k = 4096
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
wq = quantize_blocks(w, P["fp8_block_weight"])
for m in (1, 24, 64):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):  # the first compiles
        F.linear(x, w)
        fp8_gemm(quantize_rows_1xG(x, P["fp8_group_act"]), wq)
    torch.cuda.synchronize()
    print(f"launched M={m}", flush=True)
