"""The numerics contract's tensor types and its two element-wise steps, shared by the reference quantizers
(`quantize`) and their Triton twins (`triton_quant`) so that neither imports the other at module level.

The contract itself (steps 1-5, scale layouts) is stated in `numerics.quantize`; steps 2-4 are here.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from precision_engine.numerics.formats import AMAX_EPS, FP8_MAX, DType, QuantFormat, ScaleKind

# Triton runs its kernels in its CPU interpreter (it decides when a kernel is defined, so this is read once, at
# import): kernels take their interpreter-safe branches, launches their small interpreter configs.
TRITON_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

FP8_TORCH_DTYPE = {DType.FLOAT8_E4M3: torch.float8_e4m3fn, DType.FLOAT8_E5M2: torch.float8_e5m2}
# The unquantized dtypes a policy may compute in (`compute:`), as torch dtypes.
COMPUTE_TORCH_DTYPE = {DType.BF16: torch.bfloat16, DType.FP16: torch.float16, DType.FP32: torch.float32}
# What a quantizer takes: the dtypes whose step-1 `x.float()` is exact (float64 would round silently).
QUANTIZABLE_DTYPES = frozenset(COMPUTE_TORCH_DTYPE.values())


@dataclass(frozen=True)
class Quantized:
    """An FP8 tensor with its dequant scales. ``tokens`` is the unpadded token count of a tokens-transposed
    operand (its ``data`` is ``[C, M_pad]``); None for every other layout."""

    data: torch.Tensor
    scale: torch.Tensor
    fmt: QuantFormat
    tokens: int | None = None

    @property
    def shape(self) -> torch.Size:
        return self.data.shape


def as_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t in dtype; t itself where it already is. For a custom autograd Function's output: torch 2.11's
    torch.compile returns a no-op `.to()` output twice from the traced forward and hands the gradient to the
    other copy, so every compiled gradient is zero (pytorch#180642; torch 2.13 is fixed)."""
    return t if t.dtype == dtype else t.to(dtype)


def capturing_cuda_graph() -> bool:
    """Whether the current CUDA stream is capturing a graph. What the capture records replays without the Python
    that issued it: a cache lookup or a host-side check is frozen at capture time (`linear`, `check_finite`).
    False while torch.compile traces: a compiled graph quantizes its weights itself (`linear`), and Dynamo
    cannot put the stream query (a bool, not a tensor) into a full graph."""
    return (not torch.compiler.is_compiling() and torch.cuda.is_available()
            and torch.cuda.is_current_stream_capturing())


def fp8_dtype(fmt: QuantFormat) -> torch.dtype:
    return FP8_TORCH_DTYPE[fmt.dtype]


def block_buffers(rows: int, cols: int, fmt: QuantFormat, device: torch.device) -> Quantized:
    """Uninitialized data [rows, cols] and scales [ceil(rows/R), ceil(cols/C)] of an operand in `fmt`'s RxC
    blocks: what a block quantizer writes (`quantize.quantize_blocks`, its `out` / `out_t`)."""
    scale_shape = (-(-rows // fmt.block[0]), -(-cols // fmt.block[1]))
    return Quantized(torch.empty((rows, cols), dtype=fp8_dtype(fmt), device=device),
                     torch.empty(scale_shape, dtype=torch.float32, device=device), fmt)


def blocks_t_buffers(tokens: int, cols: int, fmt: QuantFormat, device: torch.device) -> Quantized:
    """Uninitialized x^T [cols, M_pad] in `fmt`'s blocks (M_pad = tokens rounded up to the blocks' width along
    tokens, as `tokens_buffers` pads) and their scales: what a blocks re-quantizer writes
    (`quantize.requantize_blocks_transposed`)."""
    width = fmt.block[1]
    return block_buffers(cols, -(-tokens // width) * width, fmt, device)


def part_views(q: Quantized, rows: Sequence[int], dim: int) -> list[Quantized]:
    """Each part's rows of a row-stacked block operand Q(W) (dim 0), or its columns of the stacked Q(W)^T (dim 1:
    where its Q(W)^T lies): `rows` weight rows per part, whole blocks of them but the last part's."""
    block_rows = q.fmt.block[0]
    data, scale = q.data.split(list(rows), dim=dim), q.scale.split([-(-r // block_rows) for r in rows], dim=dim)
    return [Quantized(d, s, q.fmt) for d, s in zip(data, scale)]


def rows_buffers(rows: int, cols: int, fmt: QuantFormat, device: torch.device) -> Quantized:
    """Uninitialized data [rows, cols] and M-major scales [rows, ceil(cols/G)] (strides (1, rows)) of an operand
    in `fmt`'s 1xG groups along K: what a rows quantizer writes."""
    scale = torch.empty((-(-cols // fmt.group), rows), dtype=torch.float32, device=device).t()
    return Quantized(torch.empty((rows, cols), dtype=fp8_dtype(fmt), device=device), scale, fmt)


def tokens_buffers(tokens: int, cols: int, fmt: QuantFormat, device: torch.device) -> Quantized:
    """Uninitialized data [cols, M_pad] (x^T, M_pad = tokens rounded up to G) and scales [cols, M_pad/G] with
    strides (1, cols) of an operand in `fmt`'s Gx1 groups along tokens: what a tokens quantizer writes."""
    m_pad = -(-tokens // fmt.group) * fmt.group
    scale = torch.empty((m_pad // fmt.group, cols), dtype=torch.float32, device=device).t()
    return Quantized(torch.empty((cols, m_pad), dtype=fp8_dtype(fmt), device=device), scale, fmt, tokens=tokens)


def scale_from_amax(amax: torch.Tensor, fmt: QuantFormat) -> torch.Tensor:
    """Contract steps 2-3: fp32 dequant scale from an fp32 amax (NaN where amax is not finite).

    fmax is a device tensor, not a Python number, on purpose: for a CPU-scalar divisor torch's CUDA division
    computes ``a * (1 / b)``, which differs from IEEE ``a / b`` in the last bit now and then (seen on an H200:
    the CUDA reference then disagreed with the CPU reference and with the kernels).
    """
    amax = amax.float()
    fmax = amax.new_full((), FP8_MAX[fmt.dtype])  # a device-side fill: no host->device copy
    scale = torch.clamp(amax, min=AMAX_EPS) / fmax
    if fmt.scale is ScaleKind.POW2:
        scale = _ceil_pow2(scale)
    return torch.where(torch.isfinite(amax), scale, torch.full_like(scale, math.nan))


def cast_to_fp8(x32: torch.Tensor, scale: torch.Tensor, fmt: QuantFormat) -> torch.Tensor:
    """Contract step 4: fp8_rne(clamp(x32 / scale, +-fmax)); `scale` broadcasts against `x32`.

    The scale is moved to x's device first: a CPU-scalar divisor would make torch's CUDA division a reciprocal
    multiply (see scale_from_amax)."""
    fmax = FP8_MAX[fmt.dtype]
    scale = torch.as_tensor(scale, dtype=torch.float32, device=x32.device)
    return torch.clamp(x32 / scale, -fmax, fmax).to(fp8_dtype(fmt))


def _ceil_pow2(s: torch.Tensor) -> torch.Tensor:
    """Smallest power of two >= s for positive normal fp32 s, on the bits (exact, unlike exp2(ceil(log2)))."""
    bits = s.view(torch.int32)
    exponent = bits & 0x7F800000
    up = torch.where((bits & 0x007FFFFF) != 0, exponent + 0x00800000, exponent)
    return up.view(torch.float32)
