"""Launch each training-step quantizer twice on a model-sized input, for Nsight Compute to profile (the second
launch of each: the first compiles). Not part of the package: a device-call tool for issue 12's quantizer
bandwidth. Shapes: the fused qkv's grad output dy [8192, 6144], the saved x [8192, 4096] (its 1x128 quantization
and the wgrad re-quantization, AUTO's and the Triton kernel's: on Hopper under Triton 3.6, AUTO's is the Gluon
kernel) and the qkv weight [6144, 4096] with its transpose.

    ncu --clock-control none -k regex:"_grad_output|_tokens_t|_requant|_rows|_blocks" --launch-skip 5 \
        --launch-count 5 --section SpeedOfLight --section WarpStateStats --section InstructionStats \
        python3 scripts/ncu_quantizers.py
"""

import torch

from precision_engine.numerics import triton_quant
from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.quantize import (quantize_blocks_stacked, quantize_rows_1xG,
                                                quantize_rows_and_tokens_transposed, requantize_tokens_transposed)

torch.manual_seed(0)
dy = torch.randn(8192, 6144, device="cuda", dtype=torch.bfloat16)
x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(6144, 4096, device="cuda", dtype=torch.bfloat16) * 0.02
for _ in range(2):
    quantize_rows_and_tokens_transposed(dy, P["fp8_group_act"], P["fp8_group_tokens"])
    xq = quantize_rows_1xG(x, P["fp8_group_act"])
    requantize_tokens_transposed(xq, P["fp8_group_tokens"])
    triton_quant.requantize_tokens_transposed(xq, P["fp8_group_tokens"])
    quantize_blocks_stacked([w], P["fp8_block_weight"], transposed=True)
torch.cuda.synchronize()
print("done")
