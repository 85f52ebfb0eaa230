"""Fused Qwen3-MoE experts: FP8 in the rollout phase (forward only), refused for training, with names."""

from dataclasses import replace

import pytest
import torch

from precision_engine.compile import compile_plan
from precision_engine.errors import UnsupportedError
from precision_engine.models import build_model, load_inventory
from precision_engine.policy import load_policy
from precision_engine.policy.model import Rule
from precision_engine.rewrite import Fp8Experts, apply, invalidate_weight_caches, restore

from helpers import sqnr_db

# Measured 21.2 dB on tiny-qwen3-moe logits (attention projections and experts in FP8, random init).
LOGITS_SQNR_FLOOR_DB = 18.0


def with_fp8_experts(policy_name: str):
    """The shipped policy plus a first rule that quantizes fused experts wherever its phases quantize linears."""
    policy = load_policy(policy_name)
    rule_sets = {}
    for name, rules in policy.rule_sets.items():
        linear = next((r.linear for r in rules if r.linear is not None), None)
        extra = (Rule(match=("re:.*mlp\\.experts",), linear=linear, label=f"{name}[x]"),) if linear else ()
        rule_sets[name] = (*extra, *rules)
    return compile_plan(replace(policy, rule_sets=rule_sets), load_inventory("tiny-qwen3-moe"))


def tokens(batch=2, seq=40):
    return torch.randint(0, 512, (batch, seq), generator=torch.Generator().manual_seed(0))


def test_fp8_experts_in_training_refused_by_name():
    plan = with_fp8_experts("jetrl_unified")
    model = build_model("tiny-qwen3-moe", device="meta")
    with pytest.raises(UnsupportedError, match=r"model\.layers\.0\.mlp\.experts, model\.layers\.1\.mlp\.experts"):
        apply(plan, model, "train")
    assert not any(isinstance(m, Fp8Experts) for m in model.modules())


def test_rollout_experts_fp8():
    plan = with_fp8_experts("fp8rl_rollout_tis")
    model = build_model("tiny-qwen3-moe", device="cpu", dtype="bf16")
    experts = model.get_submodule("model.layers.0.mlp.experts")
    keys = list(model.state_dict())
    x = tokens()
    with torch.no_grad():
        ref = model(x).logits
    report = apply(plan, model, "rollout")
    assert report.matches(plan.phases["rollout"])
    assert {"model.layers.0.mlp.experts", "model.layers.1.mlp.experts"} <= set(report.linears)
    fp8_experts = model.get_submodule("model.layers.0.mlp.experts")
    assert isinstance(fp8_experts, Fp8Experts) and fp8_experts.gate_up_proj is experts.gate_up_proj
    assert list(model.state_dict()) == keys
    with torch.no_grad():
        out = model(x).logits
        alone = model(x[1:]).logits  # batch invariance: experts see fewer tokens, same bits per token
    assert sqnr_db(ref, out) >= LOGITS_SQNR_FLOOR_DB
    assert torch.equal(alone, out[1:])
    with pytest.raises(UnsupportedError, match="forward only"):
        model(x)
    restore(model)
    assert model.get_submodule("model.layers.0.mlp.experts") is experts
    with torch.no_grad():
        assert torch.equal(model(x).logits, ref)


def test_experts_weight_cache_follows_updates():
    plan = with_fp8_experts("fp8rl_rollout_tis")
    model = build_model("tiny-qwen3-moe", device="cpu", dtype="bf16")
    apply(plan, model, "rollout")
    experts = model.get_submodule("model.layers.1.mlp.experts")
    before = experts.quantized_weight("down_proj", 3)
    with torch.no_grad():
        experts.down_proj.mul_(2)
    after = experts.quantized_weight("down_proj", 3)
    assert torch.equal(after.scale, before.scale * 2)  # re-quantized: x2 is exact, the scale doubles
    assert torch.equal(after.data.view(torch.uint8), before.data.view(torch.uint8))  # and the codes stay


def test_experts_weight_cache_follows_fused_optimizer_step():
    """AdamW(fused=True) writes the weights without bumping their version counter: the trainer's
    invalidate_weight_caches(model) drops the cache."""
    plan = with_fp8_experts("fp8rl_rollout_tis")
    model = build_model("tiny-qwen3-moe", device="cpu", dtype="bf16")
    apply(plan, model, "rollout")
    experts = model.get_submodule("model.layers.1.mlp.experts")
    before = experts.quantized_weight("down_proj", 3)
    experts.down_proj.grad = torch.ones_like(experts.down_proj)
    torch.optim.AdamW([experts.down_proj], lr=0.5, fused=True).step()
    assert invalidate_weight_caches(model) == len([m for m in model.modules() if hasattr(m, "invalidate_weight_cache")])
    after = experts.quantized_weight("down_proj", 3)
    assert not torch.equal(after.scale, before.scale)


def test_restore_keeps_parameters_replaced_while_rewritten():
    """Rewrite on meta, materialize (to_empty / a loader swaps in new Parameters), restore: the experts module
    handed back must hold the current Parameters, not the meta ones it had before the rewrite."""
    plan = with_fp8_experts("fp8rl_rollout_tis")
    model = build_model("tiny-qwen3-moe", device="meta")
    apply(plan, model, "rollout")
    model.to_empty(device="cpu")
    current = dict(model.named_parameters())
    restore(model)
    assert not any(p.is_meta for p in model.parameters())
    assert all(p is current[name] for name, p in model.named_parameters())
