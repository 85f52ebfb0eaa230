"""pipeline.prepare: policy -> plan -> model -> apply(phase) -> KV calibration, with a pluggable loader."""

import pytest
import torch
from torch import nn

from precision_engine.errors import PolicyError, UsageError
from precision_engine.models.loader import build_model
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.pipeline import calibration_batch, prepare
from precision_engine.policy import KVCacheSpec, load_policy


def test_prepare_rollout_with_fp8_kv_cache_uses_the_policys_calibration_count():
    ready = prepare("jetrl_unified_kv", "tiny-llama", phase="rollout")
    assert ready.phase == "rollout" and ready.report.matches(ready.plan.phases["rollout"])
    assert isinstance(ready.model.get_submodule("model.layers.0.self_attn.q_proj"), Fp8Linear)
    assert ready.calibration_sequences == ready.policy.kv_cache.calibration_sequences == 64  # no silent cap
    assert ready.kv_scales is not None and torch.isfinite(ready.kv_scales.k).all()


def test_the_loader_hook_builds_the_model():
    """The RL stack plugs in its own decoder through `loader(model_spec, *, device, dtype, seed)`."""
    calls = []

    def loader(model_spec, *, device, dtype, seed):
        calls.append((model_spec, device, dtype, seed))
        return build_model(model_spec, device=device, dtype=dtype, seed=seed)

    ready = prepare("jetrl_unified", "tiny-qwen3", phase="train", seed=5, loader=loader)
    assert calls == [("tiny-qwen3", "cpu", "bf16", 5)]
    assert ready.calibrator is None and ready.kv_scales is None
    assert isinstance(ready.model.get_submodule("model.layers.1.mlp.down_proj"), nn.Linear)


# jetrl_unified with its fused MoE experts moved into the FP8 rule, which no kernel can train yet
FP8_EXPERTS = ("rules.unified[0].match=[lm_head]", 'rules.unified[1].match=["re:.*_proj", "re:.*mlp\\\\.experts"]')


def test_plans_the_kernels_cannot_run_are_refused_before_loading():
    loaded = []
    with pytest.raises(PolicyError) as refused:
        prepare("jetrl_unified", "tiny-qwen3-moe", phase="rollout", loader=lambda *a, **k: loaded.append(a),
                overrides=FP8_EXPERTS)
    assert loaded == []  # no weights were built for a plan that cannot train
    [diag] = refused.value.diagnostics
    assert "FP8 fused MoE experts run in the rollout phase only" in diag.message and diag.line is not None


def test_calibration_batch_pads_given_ids_and_checks_them():
    ids, mask = calibration_batch(KVCacheSpec(), 10, token_ids=[[1, 2, 3], [4]])
    assert ids.tolist() == [[1, 2, 3], [4, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    with pytest.raises(UsageError, match="prompts.json: 10 is not a token id"):
        calibration_batch(KVCacheSpec(), 10, token_ids=[[10]], source="prompts.json")
    with pytest.raises(UsageError, match="device 'tpu'"):
        prepare(load_policy("bf16_baseline"), "tiny-llama", phase="rollout", device="tpu")


def test_overrides_are_never_dropped_or_split_into_characters():
    """A loaded Policy or a compiled Plan is final: overrides beside it were dropped without a word; a string
    was iterated into one-character overrides; None is no overrides."""
    from precision_engine.pipeline import compile_for_model

    assert load_policy("jetrl_unified", overrides=None).name == "jetrl_unified"
    with pytest.raises(UsageError, match="a list of KEY.PATH=VALUE strings, got the string 'kernel=triton'"):
        load_policy("jetrl_unified", overrides="kernel=triton")
    with pytest.raises(UsageError, match="overrides apply while a policy loads"):
        compile_for_model(load_policy("jetrl_unified"), "tiny-llama", overrides=["kernel=xyz"])
    with pytest.raises(UsageError, match="not to a compiled Plan"):
        prepare(compile_for_model("jetrl_unified", "tiny-llama"), "tiny-llama", phase="rollout",
                overrides=["kernel=triton"])
