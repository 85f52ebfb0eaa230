"""Quantizer kernels on a real GPU at full size: bitwise against the reference, both rounding paths.

The CUDA reference (the same torch ops on the GPU) is itself cross-checked against the CPU reference, so a
pass here means: compiled Triton kernel == torch on CUDA == torch on CPU, byte for byte.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from precision_engine.numerics import quantize as Q
from precision_engine.numerics.formats import FP8_MAX, Axis, DType, Granularity, QuantFormat, ScaleKind

from helpers import BASE, FORMATS, assert_bitwise

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

KIND = {Granularity.TENSOR: "tensor", Granularity.CHANNEL: "channel", Granularity.BLOCK: "blocks"}


def kind(fmt: QuantFormat) -> str:
    return KIND.get(fmt.granularity) or ("rows" if fmt.axis is Axis.K else "tokens_t")


def triton_quantize(x: torch.Tensor, fmt: QuantFormat, exact_round: bool) -> Q.Quantized:
    from precision_engine.numerics import triton_quant as T

    return T.QUANTIZERS[kind(fmt)](x, fmt, exact_round=exact_round)


def random_input(shape, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, device="cuda", generator=gen)
    x = x * torch.exp(torch.randn(shape[0], 1, device="cuda", generator=gen) * 4)  # rows spanning ~1e-7..1e7
    return x.to(torch.bfloat16)


@pytest.mark.parametrize("exact_round", [False, True], ids=["hw-cvt", "exact-round"])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.describe())
def test_full_size_bitwise(fmt, exact_round):
    x = random_input((4096 + 13, 4096 + 64), seed=hash(fmt) % 2**31)
    x[5, :300] = 0.0
    assert_bitwise(triton_quantize(x, fmt, exact_round), Q.quantize(x, fmt, backend="reference"))


@pytest.mark.parametrize(
    "fmt", [BASE[2], BASE[4], replace(BASE[3], dtype=DType.FLOAT8_E5M2)], ids=lambda f: f.describe()
)
def test_cuda_reference_equals_cpu_reference(fmt):
    x = random_input((1000, 1100), seed=7)
    on_gpu = Q.quantize(x, fmt, backend="reference")
    on_cpu = Q.quantize(x.cpu(), fmt, backend="reference")
    assert_bitwise(replace(on_gpu, data=on_gpu.data.cpu(), scale=on_gpu.scale.cpu()), on_cpu)


@pytest.mark.parametrize("exact_round", [False, True], ids=["hw-cvt", "exact-round"])
@pytest.mark.parametrize("dtype", [DType.FLOAT8_E4M3, DType.FLOAT8_E5M2])
def test_midpoints_and_their_neighbours(dtype, exact_round):
    grid = torch.arange(256, dtype=torch.uint8).view(Q.FP8_TORCH_DTYPE[dtype]).float()
    grid = grid[torch.isfinite(grid) & (grid > 0)].unique()
    mids = (grid[1:] + grid[:-1]) / 2
    row = torch.cat([torch.tensor([FP8_MAX[dtype]]), mids, -mids, torch.nextafter(mids, grid[1:]),
                     torch.nextafter(mids, grid[:-1]), grid, -grid])
    x = row[None, :].repeat(3, 1).cuda()
    fmt = QuantFormat(dtype, Granularity.CHANNEL)
    got = triton_quantize(x, fmt, exact_round)
    assert_bitwise(got, Q.quantize(x, fmt, backend="reference"))


@pytest.mark.parametrize("exact_round", [False, True], ids=["hw-cvt", "exact-round"])
@pytest.mark.parametrize("fmt", BASE, ids=lambda f: f.describe())
def test_nonfinite_and_denormal_inputs(fmt, exact_round):
    x = torch.randn(1024, 1024, device="cuda")
    x[1, 3], x[300, 700], x[900, 5] = math.nan, math.inf, -math.inf
    x[500:520] = 1e-41  # fp32 subnormals
    x[600, :128] = -1e-39
    assert_bitwise(triton_quantize(x, fmt, exact_round), Q.quantize(x, fmt, backend="reference"))


@pytest.mark.parametrize("fmt", [BASE[2], replace(BASE[2], dtype=DType.FLOAT8_E5M2, scale=ScaleKind.POW2)],
                         ids=lambda f: f.describe())
def test_fused_requantize_full_size(fmt):
    saved = Q.quantize_rows_1xG(random_input((8192 + 7, 4096), seed=3), fmt)
    got = Q.requantize_tokens_transposed(saved)
    assert_bitwise(got, Q.requantize_tokens_transposed(saved, backend="reference"))


def test_layouts_feed_scaled_mm_without_copies():
    """fprop (1x128 x 128x128) and wgrad (tokens^T x tokens^T) straight from our layouts into torch._scaled_mm."""
    m, k, n = 512, 1024, 768
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    xq = Q.quantize_rows_1xG(x, BASE[2])
    wq = Q.quantize_blocks(w, BASE[4])
    y = torch._scaled_mm(xq.data, wq.data.t(), scale_a=xq.scale, scale_b=wq.scale.t(), out_dtype=torch.bfloat16)
    y_ref = Q.dequantize(xq) @ Q.dequantize(wq).t()
    assert (y.float() - y_ref).norm() / y_ref.norm() < 1e-2
    dyt = Q.quantize_tokens_transposed(dy, BASE[3])
    xt = Q.quantize_tokens_transposed(x, BASE[3])
    dw = torch._scaled_mm(dyt.data, xt.data.t(), scale_a=dyt.scale, scale_b=xt.scale.t(), out_dtype=torch.bfloat16)
    dw_ref = Q.dequantize(dyt) @ Q.dequantize(xt).t()
    assert (dw.float() - dw_ref).norm() / dw_ref.norm() < 1e-2


TOKENS_CONFIGS = [{"BLOCK_C": 64, "CHUNKS": 1, "num_warps": 2}, {"BLOCK_C": 64, "CHUNKS": 2, "num_warps": 4},
                  {"BLOCK_C": 128, "CHUNKS": 1, "num_warps": 8}, {"BLOCK_C": 32, "CHUNKS": 1, "num_warps": 2}]


@pytest.mark.parametrize("exact_round", [False, True], ids=["hw-cvt", "exact-round"])
@pytest.mark.parametrize("rows_fmt", [BASE[2], replace(BASE[2], dtype=DType.FLOAT8_E5M2, scale=ScaleKind.POW2)],
                         ids=lambda f: f.describe())
def test_fused_grad_output_full_size(rows_fmt, exact_round):
    from precision_engine.numerics import triton_quant as T

    tokens_fmt = replace(rows_fmt, axis=Axis.TOKENS)
    x = random_input((8192 + 13, 4096 + 64), seed=11)
    x[7, 9] = math.nan
    for config in (None, {"CHUNKS": 1, "num_warps": 8}, {"CHUNKS": 2, "num_warps": 8}):
        got_r, got_t = T.quantize_rows_and_tokens_transposed(x, rows_fmt, tokens_fmt, exact_round=exact_round,
                                                             config=config)
        assert_bitwise(got_r, Q.quantize_rows_1xG(x, rows_fmt, backend="reference"))
        assert_bitwise(got_t, Q.quantize_tokens_transposed(x, tokens_fmt, backend="reference"))


@pytest.mark.parametrize("config", TOKENS_CONFIGS, ids=str)
def test_tokens_transposed_every_config(config):
    from precision_engine.numerics import triton_quant as T

    x = random_input((4096 + 13, 4096 + 64), seed=5)
    assert_bitwise(T.quantize_tokens_transposed(x, BASE[3], config=config), Q.quantize(x, BASE[3], backend="reference"))
