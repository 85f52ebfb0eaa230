"""The block-FP8 exchange format: what verl's weight sync sends and SGLang's block-FP8 loader reads.

A linear weight [N, K] travels as ``weight`` float8_e4m3fn [N, K] plus ``weight_scale_inv`` float32
[ceil(N/128), ceil(K/128)] (a dequant multiplier despite its name: ``w ~= weight * weight_scale_inv`` per
128x128 block), with ``quantization_config = {quant_method: fp8, activation_scheme: dynamic,
weight_block_size: [128, 128]}`` in the checkpoint's config. N and K need not be multiples of 128: edge
blocks are partial and their amax covers only the real elements (as SGLang's loader and verl's padded
quantizer assume).

`to_block_fp8` is `quantize_blocks` with the E4M3 128x128 format, so the FP8 weights the trainer computes
with and the weights it exports are the same bytes. The rounding is this engine's contract (IEEE division,
see `numerics.quantize`). Layout, shapes and the scale definition (amax / 448, eps 1e-10) are those of verl's
sync kernel, but not its arithmetic: it multiplies by a reciprocal, and matched these bytes in 99.90-99.99% on
the CPU, while on an H200 its scales differ from ours in the last bit in 30-55% of blocks. compressed-tensors'
FP8_BLOCK (fp32 scales) gives 100% the same bytes and scales; `from_block_fp8` equals transformers', SGLang's
and compressed-tensors' dequantization bitwise.
"""

from __future__ import annotations

import torch

from precision_engine.errors import OperandError
from precision_engine.numerics.capabilities import WEIGHT_BLOCK
from precision_engine.numerics.formats import DType, Granularity, QuantFormat
from precision_engine.numerics.contract import Quantized
from precision_engine.numerics.quantize import dequantize, quantize_blocks

WEIGHT_BLOCK_SIZE = WEIGHT_BLOCK  # the exchange format's blocks are the GEMMs' weight blocks
BLOCK_FP8 = QuantFormat(DType.FLOAT8_E4M3, Granularity.BLOCK, block=WEIGHT_BLOCK_SIZE)


def to_block_fp8(w: torch.Tensor, *, backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] (any float dtype) -> (weight float8_e4m3fn [N, K], weight_scale_inv fp32 [ceil(N/128), ceil(K/128)])."""
    q = quantize_blocks(w, BLOCK_FP8, backend=backend)
    return q.data, q.scale


def from_block_fp8(
    weight: torch.Tensor, weight_scale_inv: torch.Tensor, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """Dequantize an exchanged weight: weight * weight_scale_inv per 128x128 block, computed in fp32."""
    if weight.dtype != torch.float8_e4m3fn or weight.dim() != 2:
        raise OperandError(
            f"block-FP8 weight must be a 2-D float8_e4m3fn tensor, got {weight.dtype} {tuple(weight.shape)}"
        )
    n, k = weight.shape
    expected = (-(-n // WEIGHT_BLOCK_SIZE[0]), -(-k // WEIGHT_BLOCK_SIZE[1]))
    if tuple(weight_scale_inv.shape) != expected:
        raise OperandError(
            f"weight_scale_inv has shape {tuple(weight_scale_inv.shape)}, expected {expected} for a weight of "
            f"shape {(n, k)} with 128x128 blocks"
        )
    return dequantize(Quantized(weight, weight_scale_inv.float(), BLOCK_FP8), dtype)
