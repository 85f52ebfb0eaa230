"""ncu target: ser5t and its no-promotion twin on 4096x4096 at M=8192, one launch each after warm-up."""
import sys, torch
sys.path.insert(0, "exp7")
import gl_var4 as gl_var2
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import segment_kb
m, n, k = 8192, 4096, 4096
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
xq = quantize_rows_1xG(x, PRESET_FORMATS["fp8_group_act"]); wq = quantize_blocks(w, PRESET_FORMATS["fp8_block_weight"])
seg = segment_kb(n, k)
for acc in (False,):
    for _ in range(2):
        gl_var2.serial_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg, stages=4, unroll=4)
torch.cuda.synchronize()
