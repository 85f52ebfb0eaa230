"""verl's FSDP engine with the policy's training numerics and exact-byte weight sync.

`PrecisionFSDPEngine` subclasses verl 0.9.1's `FSDPEngineWithLMHead` and changes four steps:
- `_build_fsdp_module`: verl builds the HF model, applies LoRA and QAT, then wraps it in FSDP here; the
  policy's training phase is applied first (`rewrite.apply(plan, module, "train")`), so FSDP shards the
  `Fp8Linear`s' own Parameters and every GEMM of forward and backward runs as the plan says (Jet-RL's unified
  FP8 on FSDP). The plan is compiled from the module verl built, names and shapes as loaded.
- `optimizer_step`: after verl's step every cached Q(W) is retired (`rewrite.invalidate_weight_caches`), so
  the next forward and the next weight sync quantize the new weights.
- `get_per_tensor_param`: the weight-sync stream becomes our FP8 `weight` + `weight_scale_inv` for every
  module the rollout phase runs in FP8 (`weight_sync.rollout_tensors`), in the FSDP parameter dtype otherwise.
- `get_per_tensor_param_shard` (the `delta_sharded` checkpoint engine) is refused while the rollout runs FP8:
  it byte-diffs master-weight shards, not the FP8 bytes SGLang holds.
Without a policy in the environment (`runtime.PolicyRuntime`) nothing changes.

Registered for verl's `language_model` on `fsdp` and `fsdp2` under the ("cuda", "nvidia") key, which verl's
`EngineRegistry.get_engine_cls` consults before the device-wide default (CPU runs select it with
`VERL_ENGINE_DEVICE=cuda VERL_ENGINE_VENDOR=nvidia`).
"""

from __future__ import annotations

import logging

from verl.workers.engine import EngineRegistry, FSDPEngineWithLMHead

from precision_engine.errors import UnsupportedError
from precision_engine.integrations.verl.runtime import EXACT, PolicyRuntime
from precision_engine.integrations.verl.weight_sync import fp8_weight_formats, rollout_tensors

logger = logging.getLogger(__name__)
TRAIN = "train"


@EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device="cuda", vendor="nvidia")
class PrecisionFSDPEngine(FSDPEngineWithLMHead):
    """FSDPEngineWithLMHead that trains with the policy's training phase and syncs its exact FP8 bytes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.precision = PolicyRuntime.from_env()
        self.plan = None

    def _build_fsdp_module(self, module):
        if self.precision is not None:
            self.plan = self._rewrite_for_training(module)
        return super()._build_fsdp_module(module)

    def _rewrite_for_training(self, module):
        from precision_engine.compile import compile_plan
        from precision_engine.models.inventory import inventory_from_model
        from precision_engine.rewrite import apply

        policy = self.precision.policy
        if self._is_lora or self._qat_enabled:
            raise UnsupportedError(f"policy {policy.name}: verl's LoRA and QAT rewrite the same linears; turn them "
                                   "off (actor_rollout_ref.model.lora_rank=0, ...fsdp_config.qat.enable=false)")
        config = self.model_config.hf_config.to_dict()
        plan = compile_plan(policy, inventory_from_model(module, model_id=str(self.model_config.path), config=config))
        report = apply(plan, module, TRAIN, numerics=policy.numerics)
        logger.warning("precision-engine: policy %s, %s", policy.name, report.summary())
        return plan

    def optimizer_step(self):
        grad_norm = super().optimizer_step()
        if self.plan is not None:
            from precision_engine.rewrite import invalidate_weight_caches

            invalidate_weight_caches(self.module)
        return grad_norm

    @property
    def _sends_fp8(self) -> bool:
        return self.plan is not None and self.precision.rollout_weights == EXACT and bool(fp8_weight_formats(self.plan))

    def get_per_tensor_param(self, layered_summon=False, base_sync_done=False, **kwargs):
        params, peft_config = super().get_per_tensor_param(
            layered_summon=layered_summon, base_sync_done=base_sync_done, **kwargs
        )
        if not self._sends_fp8:
            return params, peft_config
        return rollout_tensors(params, self.plan, param_dtype=self._autocast_dtype), peft_config

    def get_per_tensor_param_shard(self, **kwargs):
        if self._sends_fp8:
            raise UnsupportedError("the delta_sharded checkpoint engine diffs master-weight shards, but SGLang holds "
                                   "our FP8 bytes: use actor_rollout_ref.rollout.checkpoint_engine.backend=naive")
        return super().get_per_tensor_param_shard(**kwargs)


__all__ = ["PrecisionFSDPEngine"]
