"""FP8 KV-cache math in SGLang's `--kv-cache-dtype fp8_e4m3` format: per-layer scales and the quantizer.

What SGLang does, and so what this math does:
- keys and values are stored as float8_e4m3fn, quantized on write with a static per-layer scale (the DEQUANT
  multiplier, x ~= q * scale), dequantized on read; without scales every scale is 1.0;
- the scales its attention backends apply are the checkpoint's per-layer `self_attn.k_scale` / `v_scale`
  tensors; the scale file (`--quantization-param-path`, one scale per layer and tensor-parallel rank for both
  k and v) only sets a float that FA3 and flashinfer do not read.
So `per_tensor` here means one scale per layer shared by k and v (max of both amaxes / 448): the rollout cache
uses the scales SGLang uses with the exported checkpoint, not the same bytes (below). `per_head` keeps separate
k and v scales per KV head (finer, our own rollout engine only; exported as the max over heads).

Quantization is the numerics contract's own (`contract.scale_from_amax`, `contract.cast_to_fp8`):
q = saturate(x_fp32 / scale) cast with round-to-nearest-even; scale = max(amax, AMAX_EPS) / 448, NaN when
amax is not finite. Finite values beyond the calibrated range saturate to +-448 * scale, as SGLang's do (its
KV write divides in bf16 and then casts, saturating; ours divides in fp32, and the two agree in about 97.0% of
the bytes, measured on the CPU). NaN and +-Inf are never saturated: they are stored as NaN, and
`numerics.nonfinite` (the `nonfinite` argument) decides whether a write that holds them raises or warns first.

Torch only. The transformers `Cache` that stores FP8 keys/values and the calibrator that keeps the scales in
step with the weights are in `rewrite.kv_cache`; SGLang's scale file is `integrations.sglang_kv_scales`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from precision_engine.errors import OperandError
from precision_engine.numerics.contract import QUANTIZABLE_DTYPES, as_dtype, cast_to_fp8, scale_from_amax
from precision_engine.numerics.formats import DType, Granularity, QuantFormat
from precision_engine.numerics.quantize import check_finite
from precision_engine.numerics.specs import KVScale, NonFinite

KV_FORMAT = QuantFormat(DType.FLOAT8_E4M3, Granularity.TENSOR)  # static scale per layer (or per head)
KV_FP8_DTYPE = torch.float8_e4m3fn
# The checkpoint tensors `<attention>.k_scale` / `.v_scale` that carry the scales to rollout engines.
KV_SCALE_SUFFIXES = (".k_scale", ".v_scale")


@dataclass(frozen=True)
class KVScales:
    """Dequant multipliers per layer: `k`, `v` are fp32 [layers] (per tensor) or [layers, kv_heads] (per head)."""

    k: torch.Tensor
    v: torch.Tensor

    @property
    def per_head(self) -> bool:
        return self.k.dim() == 2

    @property
    def num_layers(self) -> int:
        return self.k.shape[0]

    @classmethod
    def ones(cls, num_layers: int) -> KVScales:
        """SGLang's default when no scale file is given."""
        ones = torch.ones(num_layers, dtype=torch.float32)
        return cls(ones, ones.clone())

    @classmethod
    def from_amax(cls, k_amax: torch.Tensor, v_amax: torch.Tensor, mode: KVScale) -> KVScales:
        """Scales from amax [layers, kv_heads]: shared k/v per layer (per_tensor) or separate per head."""
        if mode is KVScale.PER_TENSOR:
            shared = scale_from_amax(torch.maximum(k_amax.amax(dim=1), v_amax.amax(dim=1)), KV_FORMAT)
            return cls(shared, shared.clone())
        return cls(scale_from_amax(k_amax, KV_FORMAT), scale_from_amax(v_amax, KV_FORMAT))


def quantize_kv(states: torch.Tensor, scale: torch.Tensor, *, nonfinite: NonFinite | str = NonFinite.PROPAGATE
                ) -> torch.Tensor:
    """[B, H, T, D] states -> FP8 e4m3fn with a scale of shape [] or [H] (per head); NaN/Inf -> NaN.

    `nonfinite` is the policy's `numerics.nonfinite` (error raises NonFiniteError, warn warns; the default
    propagates, without a host sync)."""
    if states.dtype not in QUANTIZABLE_DTYPES:
        raise OperandError(f"quantize_kv needs bf16/fp16/fp32 states, got {states.dtype}")
    check_finite(states, nonfinite, "KV cache write")
    x32 = states.float()
    x32 = torch.where(torch.isinf(x32), torch.full_like(x32, math.nan), x32)  # saturating +-Inf would hide it
    return cast_to_fp8(x32, _broadcastable(scale, states), KV_FORMAT)


def dequantize_kv(states_fp8: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if states_fp8.dtype != KV_FP8_DTYPE:
        raise OperandError(f"dequantize_kv reads {KV_FP8_DTYPE} states (quantize_kv's), got {states_fp8.dtype}")
    return as_dtype(states_fp8.float() * _broadcastable(scale, states_fp8), dtype)


def _broadcastable(scale: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """scale, [] (any states) or [H] (states [B, H, T, D]), shaped to multiply them; a misfit is named here, not
    left to a broadcast."""
    per_head = scale.dim() == 1 and states.dim() == 4 and scale.numel() == states.shape[1]
    if scale.dim() != 0 and not per_head:
        heads = f"[{states.shape[1]}] (per KV head)" if states.dim() == 4 else "[H] (per KV head, for [B, H, T, D])"
        raise OperandError(f"a KV scale is [] (per tensor) or {heads} for states of shape {tuple(states.shape)}, "
                           f"got shape {tuple(scale.shape)}")
    if not scale.is_floating_point():
        raise OperandError(f"a KV scale is a float dequant multiplier, got {scale.dtype}")
    scale = scale.to(device=states.device, dtype=torch.float32)
    return scale.view(1, -1, 1, 1) if scale.dim() == 1 else scale


def head_amax(states: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
    """max |state| per KV head over valid tokens: [B, H, T, D] (mask [B, T] bool) -> fp32 [H].

    NaN propagates (torch.amax keeps NaN). Padding is selected away, not multiplied by 0: a non-finite padded
    state would give 0 * inf = NaN.
    """
    magnitude = states.detach().float().abs()
    if token_mask is not None:
        magnitude = torch.where(token_mask[:, None, :, None].to(magnitude.device), magnitude, 0.0)
    return magnitude.amax(dim=(0, 2, 3))
