"""From a policy to a ready model in one call: the library API behind `check`, `export`, `run` and verl.

    policy -> inventory -> plan -> load model -> apply(phase) -> KV calibration

    from precision_engine.pipeline import prepare
    from precision_engine.rewrite.kv_cache import cache_kwargs
    ready = prepare("jetrl_unified_kv", "tiny-llama", phase="rollout")
    ids = torch.randint(0, ready.model.config.vocab_size, (2, 16))
    ready.model(input_ids=ids, **cache_kwargs(ready.model, ready.calibrator.new_cache(ready.model.config)))

Each step is also callable alone (`compile_for_model`, `check_device`, `calibration_batch`, `calibrate`). A plan
the kernels cannot run is refused here, with the same located diagnostics `precision validate --model` prints,
before any weight is loaded. The model comes from `loader(model_spec, *, device, dtype, seed)`: by default the
transformers loader (`models.loader.load_model`: a local HF directory's weights, else random ones); the RL
stack passes its own decoder's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from precision_engine.compile import Plan, compile_plan, model_diagnostics
from precision_engine.errors import PolicyError, UsageError
from precision_engine.models.loader import load_inventory, load_model
from precision_engine.numerics.kv_cache import KVScales
from precision_engine.numerics.specs import KVCacheSpec
from precision_engine.policy import load_policy
from precision_engine.policy.model import Policy
from precision_engine.rewrite import RewriteReport, apply
from precision_engine.rewrite.kv_cache import KVCacheCalibrator

ModelLoader = Callable[..., nn.Module]  # (model_spec, *, device, dtype, seed) -> nn.Module
CALIBRATION_SEQ_LEN = 64  # tokens per random calibration sequence


@dataclass(frozen=True)
class Prepared:
    """A model rewritten for one phase of a plan, with its KV-cache calibrator when the policy has an FP8 cache."""

    plan: Plan
    model: nn.Module
    phase: str
    report: RewriteReport
    calibrator: KVCacheCalibrator | None = None
    calibration_sequences: int = 0  # how many sequences the KV scales were calibrated on

    @property
    def policy(self) -> Policy:
        return self.plan.policy

    @property
    def kv_scales(self) -> KVScales | None:
        return None if self.calibrator is None else self.calibrator.scales


def compile_for_model(policy: str | Policy, model_spec: str, *, overrides: Sequence[str] = ()) -> Plan:
    """Load `policy` (a path, a shipped name or a Policy), compile it for `model_spec`, and refuse with a
    PolicyError carrying every located error if the model cannot run it (what `validate --model` reports)."""
    if isinstance(policy, Policy) and overrides:  # a loaded policy is final: its overrides would be dropped
        raise UsageError("overrides apply while a policy loads: pass its name or path, or load_policy(..., "
                         "overrides=...) first")
    loaded = policy if isinstance(policy, Policy) else load_policy(policy, overrides=overrides)
    inventory = load_inventory(model_spec)
    errors = [d for d in model_diagnostics(loaded, inventory) if d.is_error]
    if errors:
        raise PolicyError(errors)
    return compile_plan(loaded, inventory)


def check_device(device: str) -> None:
    """`device` names a device this machine has; a UsageError with a hint otherwise."""
    if device not in ("cpu", "cuda"):
        raise UsageError(f"device {device!r}: use cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("device cuda: no CUDA GPU is visible here (hint: --device cpu)")


def calibration_batch(
    spec: KVCacheSpec,
    vocab_size: int,
    *,
    token_ids: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
    source: str = "calibration token ids",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(input_ids [B, T], attention_mask or None) to calibrate KV scales on.

    Given `token_ids` (real prompts: the scales then mean something), every row is used, right-padded;
    otherwise the policy's `calibration_sequences` random sequences, which only exercise the pipeline.
    `source` names the ids in error messages (e.g. the file they came from).
    """
    if token_ids is None:
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, vocab_size, (spec.calibration_sequences, CALIBRATION_SEQ_LEN), generator=generator)
        return ids, None
    rows = [list(row) for row in token_ids]
    if not rows or not all(rows):
        raise UsageError(f"{source}: expected a non-empty list of non-empty token-id lists")
    bad = [t for row in rows for t in row if type(t) is not int or not 0 <= t < vocab_size]
    if bad:
        raise UsageError(f"{source}: {bad[0]!r} is not a token id in [0, {vocab_size})")
    width = max(len(row) for row in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids, mask


def calibrate(
    spec: KVCacheSpec, model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> KVCacheCalibrator:
    """A calibrator for `model`'s FP8 KV cache, calibrated once on these sequences (on the model's device)."""
    device = next(model.parameters()).device
    mask = None if attention_mask is None else attention_mask.to(device)
    calibrator = KVCacheCalibrator(spec, input_ids.to(device), mask)
    with torch.no_grad():
        calibrator.after_weight_update(model)
    return calibrator


def prepare(
    policy: str | Policy | Plan,
    model_spec: str,
    *,
    phase: str,
    device: str = "cpu",
    dtype: str = "bf16",
    seed: int = 0,
    overrides: Sequence[str] = (),
    loader: ModelLoader | None = None,
    calibration_ids: Sequence[Sequence[int]] | None = None,
    calibration_source: str = "calibration token ids",
) -> Prepared:
    """policy -> inventory -> plan -> load model -> apply(phase) -> KV calibration (FP8 KV caches only).

    `policy` may be a Plan `compile_for_model` made for `model_spec` already (when the caller needs it to choose
    the loader); it is used as it is, `overrides` do not apply to it."""
    check_device(device)
    if isinstance(policy, Plan) and overrides:
        raise UsageError("overrides apply while a policy loads, not to a compiled Plan: pass the policy instead")
    plan = policy if isinstance(policy, Plan) else compile_for_model(policy, model_spec, overrides=overrides)
    if phase not in plan.phases:
        raise UsageError(f"unknown phase {phase!r}; the plan has {', '.join(plan.phases)}")
    model = (loader or load_model)(model_spec, device=device, dtype=dtype, seed=seed)
    report = apply(plan, model, phase)
    kv = plan.policy.kv_cache
    if not kv.is_fp8:
        return Prepared(plan, model, phase, report)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    ids, mask = calibration_batch(kv, vocab, token_ids=calibration_ids, seed=seed, source=calibration_source)
    return Prepared(plan, model, phase, report, calibrate(kv, model, ids, mask), calibration_sequences=len(ids))
