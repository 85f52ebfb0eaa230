"""One 4096x4096 GEMM at M = 8192 through the Gluon kernel, the Triton kernel and cuBLAS FP8, three launches
each, for `ncu` to read (scripts only: not part of the package)."""

import sys

import torch

from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.gluon_gemm import GluonConfig, gluon_block_scaled_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import PREFILL, block_scaled_gemm, segment_kb

m, n, k = 8192, 4096, 4096
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
xq = quantize_rows_1xG(x, PRESET_FORMATS["fp8_group_act"])
wq = quantize_blocks(w, PRESET_FORMATS["fp8_block_weight"])
seg = segment_kb(n, k)
cfg = GluonConfig()
for _ in range(3):
    gluon_block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg, config=cfg)
    block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg, config=PREFILL)
    fp8_gemm(xq, wq, kernel=Kernel.CUBLAS, batch_invariant=False)
torch.cuda.synchronize()
