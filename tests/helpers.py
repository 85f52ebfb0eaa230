"""Formats and measures shared by the numerics tests (importable as `helpers`: pyproject puts tests/ on the path)."""

from dataclasses import replace

import torch

from precision_engine.numerics.formats import Axis, DType, Granularity, QuantFormat, ScaleKind
from precision_engine.numerics.quantize import Quantized

# One E4M3 format per granularity (tensor, channel, 1x128, 128x1, 128x128) ...
BASE = [
    QuantFormat(DType.FLOAT8_E4M3, Granularity.TENSOR),
    QuantFormat(DType.FLOAT8_E4M3, Granularity.CHANNEL),
    QuantFormat(DType.FLOAT8_E4M3, Granularity.GROUP, group=128, axis=Axis.K),
    QuantFormat(DType.FLOAT8_E4M3, Granularity.GROUP, group=128, axis=Axis.TOKENS),
    QuantFormat(DType.FLOAT8_E4M3, Granularity.BLOCK, block=(128, 128)),
]
# ... and each of them in every FP8 dtype with both scale kinds.
FORMATS = [replace(f, dtype=d, scale=s) for f in BASE for d in DType if d.is_fp8 for s in ScaleKind]


def sqnr_db(ref: torch.Tensor, approx: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio of `approx` against `ref`, in dB, computed in float64."""
    ref, approx = ref.double(), approx.double()
    return float(20 * torch.log10(ref.norm() / (ref - approx).norm()))


def assert_bitwise(got: Quantized, ref: Quantized) -> None:
    """Same bytes and scales; NaN positions compared as positions (a NaN's sign bit is not specified)."""
    assert got.data.shape == ref.data.shape and got.scale.shape == ref.scale.shape
    assert got.scale.stride() == ref.scale.stride() and got.tokens == ref.tokens
    g, r = got.data.float(), ref.data.float()
    assert torch.equal(torch.isnan(g), torch.isnan(r))
    keep = ~torch.isnan(r)
    assert torch.equal(got.data.view(torch.uint8)[keep], ref.data.view(torch.uint8)[keep])
    assert torch.equal(torch.isnan(got.scale), torch.isnan(ref.scale))
    assert torch.equal(got.scale.nan_to_num(), ref.scale.nan_to_num())
