"""Numeric formats: the vocabulary shared by the policy DSL, the compiler and the kernels.

Torch-free on purpose: `precision validate` imports this module and must start in well under a second.
The torch side of each format (dtype objects, fmax as a tensor) lives in `numerics.quantize`.

A `QuantFormat` says how one GEMM operand is quantized:

- `dtype`: the element type (FP8 E4M3 / E5M2, or a plain float type for "not quantized").
- `granularity`: how many elements share one scale.
    tensor  one scale for the whole tensor
    channel one scale per output row (weights) or per token (activations)
    group   `group` consecutive elements along `axis` share a scale: 1x128 along K for activations and
            grad outputs (axis=k), 128x1 along tokens for the wgrad operands (axis=tokens)
    block   a `block` = (rows, cols) tile shares a scale: 128x128 for weights
- `scale`: fp32 scales, or power-of-two (UE8M0) scales rounded up so no value saturates.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class DType(str, Enum):
    FLOAT8_E4M3 = "float8_e4m3"
    FLOAT8_E5M2 = "float8_e5m2"
    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"

    @property
    def is_fp8(self) -> bool:
        return self in (DType.FLOAT8_E4M3, DType.FLOAT8_E5M2)

    @property
    def bits(self) -> int:
        return {DType.FP32: 32}.get(self, 8 if self.is_fp8 else 16)


# Largest finite value of each FP8 type (OCP FP8: E4M3 "fn" has no infinities, E5M2 follows IEEE).
FP8_MAX = {DType.FLOAT8_E4M3: 448.0, DType.FLOAT8_E5M2: 57344.0}

# Floor on amax before dividing by fmax, so all-zero groups get a finite, non-zero scale (never NaN).
# 1e-10 is what SGLang's per-token-group quantizer and verl's weight sync use.
AMAX_EPS = 1e-10


class Granularity(str, Enum):
    TENSOR = "tensor"
    CHANNEL = "channel"
    GROUP = "group"
    BLOCK = "block"


class ScaleKind(str, Enum):
    FP32 = "fp32"
    POW2 = "pow2"  # UE8M0: scale = 2**ceil(log2(amax / fmax)), as DeepGEMM uses on Blackwell


class Axis(str, Enum):
    """The axis a 1-D group runs along, for a GEMM operand laid out [tokens, K]."""

    K = "k"  # 1x128: along the reduction dim of fprop/dgrad (activations, grad outputs)
    TOKENS = "tokens"  # 128x1: along tokens, the reduction dim of the wgrad GEMM


class Kernel(str, Enum):
    AUTO = "auto"
    CUBLAS = "cublas"  # torch._scaled_mm, blockwise scales on Hopper
    CUBLAS_PINNED = "cublas_pinned"  # the same cuBLASLt GEMM with one algorithm pinned per shape: batch-invariant
    TRITON = "triton"
    DEEP_GEMM = "deep_gemm"
    REFERENCE = "reference"  # exact per 128-wide K block in float64: batch-invariant, slow, runs anywhere
    EMULATED = "emulated"  # dequantize to fp32 and one fp32 matmul: fast off CUDA, not batch-invariant


@dataclass(frozen=True)
class QuantFormat:
    dtype: DType
    granularity: Granularity = Granularity.TENSOR
    group: int | None = None  # elements per group, granularity=group
    block: tuple[int, int] | None = None  # (rows, cols), granularity=block
    axis: Axis = Axis.K
    scale: ScaleKind = ScaleKind.FP32

    @property
    def is_quantized(self) -> bool:
        return self.dtype.is_fp8

    def describe(self) -> str:
        """Short human label used in plan tables: 'e4m3 1x128', 'e4m3 128x128', 'bf16'."""
        if not self.is_quantized:
            return self.dtype.value
        short = self.dtype.value.removeprefix("float8_")
        if self.granularity is Granularity.BLOCK:
            shape = f"{self.block[0]}x{self.block[1]}"
        elif self.granularity is Granularity.GROUP:
            shape = f"1x{self.group}" if self.axis is Axis.K else f"{self.group}x1"
        else:
            shape = self.granularity.value
        pow2 = " pow2" if self.scale is ScaleKind.POW2 else ""
        return f"{short} {shape}{pow2}"


@dataclass(frozen=True)
class LinearSpec:
    """The numerics of one linear layer: a format per GEMM operand.

    fprop  y  = Q(x, input) @ Q(W, weight)^T
    dgrad  dx = Q(dy, grad_output) @ Q(W, weight)
    wgrad  dW = Q(dy, wgrad_operands)^T @ Q(x, wgrad_x)           (x re-quantized from the saved Q(x))

    `grad_output` / `wgrad_operands` of None mean that GEMM runs in the compute dtype (rollout-only policies
    leave them unset). `wgrad_input`: x^T's own wgrad format where it differs from dy^T's; 128x128 blocks over
    (channels, tokens) give the wgrad the fprop's GEMM form (1x128 by 128x128), which the block-scaled GEMMs
    run faster than 1x128 by 1x128. `compute` is the dtype of everything that is not quantized (outputs, bias,
    grads).
    """

    weight: QuantFormat
    input: QuantFormat
    grad_output: QuantFormat | None = None
    wgrad_operands: QuantFormat | None = None
    compute: DType = DType.BF16
    kernel: Kernel = Kernel.AUTO
    wgrad_input: QuantFormat | None = None

    @property
    def forward_is_fp8(self) -> bool:
        return self.weight.is_quantized and self.input.is_quantized

    @property
    def wgrad_x(self) -> QuantFormat | None:
        """x^T's format in the wgrad: `wgrad_input`, else `wgrad_operands` (None: the wgrad is not FP8)."""
        return self.wgrad_input or self.wgrad_operands


# Presets by name: `formats:` in a policy may reference these without defining them.
PRESET_FORMATS: dict[str, QuantFormat] = {
    "fp8_block_weight": QuantFormat(DType.FLOAT8_E4M3, Granularity.BLOCK, block=(128, 128)),
    "fp8_group_act": QuantFormat(DType.FLOAT8_E4M3, Granularity.GROUP, group=128, axis=Axis.K),
    "fp8_group_tokens": QuantFormat(DType.FLOAT8_E4M3, Granularity.GROUP, group=128, axis=Axis.TOKENS),
    "fp8_tensor": QuantFormat(DType.FLOAT8_E4M3, Granularity.TENSOR),
    "fp8_channel": QuantFormat(DType.FLOAT8_E4M3, Granularity.CHANNEL),
    "bf16": QuantFormat(DType.BF16),
    "fp32": QuantFormat(DType.FP32),
}
