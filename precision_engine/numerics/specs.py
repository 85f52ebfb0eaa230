"""Run-time switches of the numerics beyond operand formats: non-finite handling, batch invariance, KV cache.

Torch-free frozen dataclasses and string enums, like `formats`: the kernels, the FP8 linear and the KV cache
take them as arguments, and the policy layer builds them from YAML (and re-exports them), so the bottom layer
never imports the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from precision_engine.numerics.formats import DType


class NonFinite(str, Enum):
    ERROR = "error"  # raise on NaN/Inf in a quantized operand (costs a host sync)
    WARN = "warn"
    PROPAGATE = "propagate"  # let NaN flow to the output; never silently saturate


@dataclass(frozen=True)
class NumericsSpec:
    nonfinite: NonFinite = NonFinite.PROPAGATE
    batch_invariant: bool = True  # a row's result never depends on how many rows share the GEMM


class KVScale(str, Enum):
    PER_TENSOR = "per_tensor"
    PER_HEAD = "per_head"


class Calibrate(str, Enum):
    NEVER = "never"  # scales stay 1.0 (SGLang's default without a scale file)
    ONCE = "once"  # calibrate before the first rollout only
    EVERY_WEIGHT_UPDATE = "every_weight_update"  # FP8-RL: scales follow the weights


@dataclass(frozen=True)
class KVCacheSpec:
    dtype: DType = DType.BF16
    scale: KVScale = KVScale.PER_TENSOR
    calibrate: Calibrate = Calibrate.NEVER
    calibration_sequences: int = 64

    @property
    def is_fp8(self) -> bool:
        return self.dtype.is_fp8
