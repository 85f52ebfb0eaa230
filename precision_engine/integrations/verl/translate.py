"""A policy in verl 0.9.1's terms: the Hydra overrides of `verl/trainer/config/ppo_trainer.yaml` it implies, and
the reason for every part of it verl or SGLang cannot express (UnsupportedError, never a silent default).

What each part of the policy becomes (keys read in verl 0.9.1's config and workers):
- training phase -> our FSDP engine (`engine.PrecisionFSDPEngine`, via PRECISION_POLICY): the rewrites go in
  before FSDP wraps the model. BF16 master weights -> `actor_rollout_ref.actor.fsdp_config.model_dtype=bf16`
  (verl's default is fp32); FSDP's mixed precision computes in bf16, so every unquantized module must too.
- rollout FP8 linears -> SGLang's block FP8 with our bytes: `rollout.quantization` stays null (verl would
  re-quantize), `engine_kwargs.sglang.quantization=fp8` and `json_model_override_args` carrying the plan's
  `quantization_config` (engine kwargs are merged last into SGLang's ServerArgs), the engine sends
  `weight` + `weight_scale_inv`, and the checkpoint engine stays `naive` (delta sync diffs master shards).
  `rollout.quantization=fp8` from the user opts into verl's own re-quantization instead, labelled as such.
- KV cache -> `engine_kwargs.sglang.kv_cache_dtype`. SGLang loads KV scales at start only and has no API to
  change them; the `k_scale` tensors a weight update could carry reach `attn.k_scale` but not the float
  (`k_scale_float`) that flashinfer bakes into its CUDA graphs, and verl's update path offers no custom loader
  for it. So `calibrate: never` (unit scales) is run as asked and any calibration is refused.
- correction -> `algorithm.rollout_correction.*` (`rl.correction.verl_rollout_correction`), with the rollout's
  own logprobs (`rollout.calculate_log_probs=true`).
- `numerics.batch_invariant` -> SGLang's deterministic inference, for one sample per prompt only: verl 0.9.1's
  SGLang server sends no per-request seed, and in that mode every sample of a group draws the same tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from precision_engine.errors import UnsupportedError
from precision_engine.integrations.hf_export import quantization_config
from precision_engine.integrations.sglang.rollout import check_rollout
from precision_engine.models.inventory import ModuleKind
from precision_engine.numerics.formats import DType
from precision_engine.policy.model import Calibrate, Policy
from precision_engine.rl.correction import verl_rollout_correction

ROLLOUT = "actor_rollout_ref.rollout"
SGLANG = f"{ROLLOUT}.engine_kwargs.sglang"
NATIVE_FP8 = f"{ROLLOUT}.quantization"  # the user's opt-in to verl's own FP8 re-quantization
MASTER_DTYPE = {DType.FP32: "fp32", DType.BF16: "bf16"}
# Numerics keys `translate` sets only for some policies: the policy decides them also where it leaves them unset.
POLICY_KEYS = (f"{SGLANG}.quantization", f"{SGLANG}.json_model_override_args", f"{SGLANG}.kv_cache_dtype",
               f"{SGLANG}.enable_deterministic_inference")


@dataclass(frozen=True)
class Translation:
    """`overrides`: dotted verl key -> Python value (None is null); `notes`: what the run does, for humans."""

    overrides: dict[str, object]
    notes: list[str] = field(default_factory=list)
    rollout_weights: str = "exact"  # runtime.EXACT or runtime.VERL


def translate(policy: Policy, plan, *, native_fp8: bool = False, samples_per_prompt: int = 1) -> Translation:
    """The verl overrides for `policy` compiled against the model (`plan`), or UnsupportedError with the reason."""
    _check_training(plan)
    rollout = check_rollout(plan)
    out: dict[str, object] = {}
    notes = [f"trainer: verl FSDP with precision-engine's engine, policy {policy.name} training phase "
             f"({sum(m.is_fp8 for m in plan.phases['train'].modules)} FP8 linears)"]
    master = MASTER_DTYPE.get(policy.master_weights)
    if master is None:
        raise UnsupportedError(f"verl keeps master weights in fp32 or bf16, not {policy.master_weights.value}")
    for role in ("actor", "ref"):
        out[f"actor_rollout_ref.{role}.fsdp_config.model_dtype"] = master

    out[f"{ROLLOUT}.quantization"] = "fp8" if native_fp8 and rollout.fp8_linears else None
    if rollout.fp8_linears and not native_fp8:
        out[f"{SGLANG}.quantization"] = "fp8"
        out[f"{SGLANG}.json_model_override_args"] = json.dumps({"quantization_config": quantization_config(plan)},
                                                               separators=(",", ":"))
        out[f"{ROLLOUT}.checkpoint_engine.backend"] = "naive"
        trained = {m.module.name for m in plan.phases["train"].modules if m.is_fp8}
        whose = "the trainer's forward" if trained >= set(rollout.fp8_linears) else "our rollout quantizer"
        notes.append(f"rollout: SGLang block FP8 for {len(rollout.fp8_linears)} linears with {whose}'s exact bytes "
                     "(weight + weight_scale_inv, sent by precision-engine's engine)")
    elif rollout.fp8_linears:
        notes.append("rollout: FP8 weights RE-QUANTIZED BY VERL (rollout.quantization=fp8): verl's reciprocal-multiply "
                     "kernel, not our bytes (about 0.1% of bytes and up to half of the scales differ), and verl's "
                     "own skip list, not the plan's")
    else:
        notes.append("rollout: SGLang in bf16")

    kv = policy.kv_cache
    if rollout.kv_cache_dtype:
        if kv.calibrate is not Calibrate.NEVER:
            raise UnsupportedError(
                f"kv_cache.calibrate: {kv.calibrate.value} cannot run on verl 0.9.1 + SGLang: SGLang loads KV "
                "scales at start only, a weight update's k_scale/v_scale tensors never reach the k_scale_float "
                "its flashinfer CUDA graphs use, and verl's weight sync has no loader hook to set it (hint: "
                "--set kv_cache.calibrate=never runs SGLang's unit scales; the builtin backend recalibrates)")
        out[f"{SGLANG}.kv_cache_dtype"] = rollout.kv_cache_dtype
        notes.append(f"KV cache: {rollout.kv_cache_dtype} with SGLang's unit scales (calibrate: never)")

    out.update(verl_rollout_correction(policy.correction))
    out[f"{ROLLOUT}.calculate_log_probs"] = True

    if rollout.deterministic and samples_per_prompt == 1:
        out[f"{SGLANG}.enable_deterministic_inference"] = True
    elif rollout.deterministic:
        rollout = replace(rollout, deterministic=False)
        notes.append(f"SGLang deterministic inference OFF although numerics.batch_invariant is true: with "
                     f"{samples_per_prompt} samples per prompt and no per-request seed from verl 0.9.1, every "
                     "sample of a group would draw the same tokens; the trainer stays batch-invariant")
    notes += ["identity (trainer vs SGLang): " + line for line in rollout.identity_lines()]
    return Translation(out, notes, "verl" if native_fp8 and rollout.fp8_linears else "exact")


def _check_training(plan) -> None:
    train = plan.phases["train"]
    experts = [m.module.name for m in train.modules if m.is_fp8 and m.module.kind is ModuleKind.EXPERTS]
    if experts:
        raise UnsupportedError(f"FP8 MoE experts in training ({experts[0]}, ...): no grouped FP8 backward yet "
                               "(hint: a `compute: bf16` rule for experts in the train rule set)")
    other = sorted({m.compute.value for m in train.modules if not m.is_fp8 and m.compute is not DType.BF16})
    if other:
        raise UnsupportedError(f"verl's FSDP mixed precision computes unquantized modules in bf16; the training "
                               f"phase asks {', '.join(other)} for some (hint: `compute: bf16`)")
