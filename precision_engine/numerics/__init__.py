"""FP8 numerics: formats (torch-free), quantizers and their Triton kernels, the block-FP8 exchange format.

Importing this package stays torch-free (`precision validate` imports `numerics.formats`); the torch-backed
names below load on first access.
"""

from __future__ import annotations

import importlib

from precision_engine.numerics.formats import (
    AMAX_EPS,
    FP8_MAX,
    PRESET_FORMATS,
    Axis,
    DType,
    Granularity,
    Kernel,
    LinearSpec,
    QuantFormat,
    ScaleKind,
)

_LAZY = {
    "Quantized": "contract",
    "quantize": "quantize",
    "dequantize": "quantize",
    "quantize_rows_1xG": "quantize",
    "quantize_blocks": "quantize",
    "quantize_tokens_transposed": "quantize",
    "requantize_tokens_transposed": "quantize",
    "check_finite": "quantize",
    "scale_from_amax": "contract",
    "fp8_dtype": "contract",
    "to_block_fp8": "exchange",
    "from_block_fp8": "exchange",
}

__all__ = [
    "AMAX_EPS",
    "FP8_MAX",
    "PRESET_FORMATS",
    "Axis",
    "DType",
    "Granularity",
    "Kernel",
    "LinearSpec",
    "QuantFormat",
    "ScaleKind",
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(f"precision_engine.numerics.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
