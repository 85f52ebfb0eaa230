"""What a policy's rollout phase means for SGLang: which of its numerics SGLang can run, and the server
arguments that run them.

SGLang (read in 0.5.12 .. 0.5.23, `python/sglang/srt/server_args.py`) expresses a rollout phase through:
- `quantization: fp8` plus a block `quantization_config` (from the checkpoint's config.json or
  `json_model_override_args`): weights float8_e4m3fn in 128x128 blocks with fp32 `weight_scale_inv`,
  activations quantized on the fly in 1x128 groups along K with fp32 scales (`activation_scheme: dynamic`);
  `ignored_layers` are matched by dotted module path, so the skip list is explicit names, never patterns.
- `kv_cache_dtype`: `fp8_e4m3` / `fp8_e5m2` with one static scale per layer, 1.0 unless a scale file
  (`quantization_param_path`) or checkpoint `k_scale` / `v_scale` tensors give another; scales load at start only.
- `enable_deterministic_inference`: batch-invariant BF16 ops (matmul, attention on fa3 / flashinfer / triton,
  sampling). It does not cover the FP8 GEMMs, so no FP8 module of SGLang is batch-invariant.
A rollout format outside that vocabulary is refused with the reason (`check_rollout`), never approximated.
"""

from __future__ import annotations

from dataclasses import dataclass

from precision_engine.errors import UnsupportedError
from precision_engine.numerics.formats import Axis, DType, Granularity, QuantFormat, ScaleKind

ROLLOUT = "rollout"
SGLANG_WEIGHT = QuantFormat(DType.FLOAT8_E4M3, Granularity.BLOCK, block=(128, 128))
SGLANG_ACTIVATION = QuantFormat(DType.FLOAT8_E4M3, Granularity.GROUP, group=128, axis=Axis.K)
KV_CACHE_DTYPES = {DType.FLOAT8_E4M3: "fp8_e4m3", DType.FLOAT8_E5M2: "fp8_e5m2"}


@dataclass(frozen=True)
class RolloutNumerics:
    """The SGLang settings a rollout phase maps to (server-argument names, not flags)."""

    fp8_linears: tuple[str, ...]  # module names SGLang runs as block-FP8 linears
    kv_cache_dtype: str | None  # None: the model dtype (bf16)
    deterministic: bool  # enable_deterministic_inference

    def identity_lines(self) -> list[str]:
        """What SGLang does NOT make bitwise equal to our trainer, even when the policy's phases are identical."""
        lines = []
        if self.fp8_linears:
            lines.append(
                f"{len(self.fp8_linears)} FP8 linears: SGLang multiplies our exact weight bytes and quantizes "
                "activations with the same formula (1x128, amax/448, fp32 scales), but its FP8 GEMMs (DeepGEMM / "
                "CUTLASS) are not our kernels and not batch-invariant, so their outputs differ in the last bits"
            )
        lines.append(
            "BF16 modules, attention, norms and sampling: SGLang's kernels"
            + (" in deterministic mode (batch-invariant, but not the trainer's bits)" if self.deterministic
               else " (not batch-invariant: a row's result depends on the batch)")
        )
        if self.kv_cache_dtype:
            lines.append(f"KV cache {self.kv_cache_dtype}: keys and values are rounded in rollout only")
        lines.append("so rollout logprobs differ from the trainer's on this backend, unified policies' too: only the "
                     "policy's IS correction, where it has one, accounts for the difference")
        return lines


def check_rollout(plan) -> RolloutNumerics:
    """The SGLang settings for `plan`'s rollout phase, or UnsupportedError naming what SGLang cannot run."""
    policy = plan.policy
    phase_plan = plan.phases[ROLLOUT]
    fp8 = [m for m in phase_plan.modules if m.is_fp8]
    for m in fp8:
        spec = m.linear
        _require(spec.weight, SGLANG_WEIGHT, m.module.name, "weight", "128x128 e4m3 blocks with fp32 scales")
        _require(spec.input, SGLANG_ACTIVATION, m.module.name, "input", "1x128 e4m3 groups along K, fp32 scales")
        if spec.compute is not DType.BF16:
            raise UnsupportedError(f"{m.module.name}: SGLang's FP8 linears compute in bf16, the policy asks "
                                   f"{spec.compute.value}")
    others = sorted({m.compute.value for m in phase_plan.modules if not m.is_fp8 and m.compute is not DType.BF16})
    if others:
        raise UnsupportedError(f"SGLang runs the unquantized modules in the model dtype (bf16); the rollout phase "
                               f"asks {', '.join(others)} for some (hint: `compute: bf16`)")
    kv = policy.kv_cache
    if kv.is_fp8:
        if kv.dtype not in KV_CACHE_DTYPES:
            raise UnsupportedError(f"SGLang has no {kv.dtype.value} KV cache")
    elif kv.dtype is not DType.BF16:
        raise UnsupportedError(f"SGLang keeps a non-FP8 KV cache in the model dtype (bf16), not {kv.dtype.value}")
    return RolloutNumerics(
        fp8_linears=tuple(m.module.name for m in fp8),
        kv_cache_dtype=KV_CACHE_DTYPES.get(kv.dtype),
        deterministic=policy.numerics.batch_invariant,
    )


def _require(fmt: QuantFormat, expected: QuantFormat, module: str, role: str, what: str) -> None:
    if fmt != expected:
        pow2 = " (UE8M0 power-of-two scales are DeepGEMM's Blackwell layout, not SGLang's checkpoint format)" \
            if fmt.scale is ScaleKind.POW2 else ""
        raise UnsupportedError(f"{module}: SGLang's block-FP8 linear takes {role} as {what}; the policy's rollout "
                               f"phase uses {fmt.describe()}{pow2}")
