"""The receiving side of weight sync: a rollout model loaded from an export computes with the trainer's bytes."""

import pytest
import torch

from precision_engine.compile import compile_plan
from precision_engine.errors import NonFiniteError, OperandError, UsageError
from precision_engine.integrations import export_checkpoint, iter_rollout_weights, load_checkpoint
from precision_engine.integrations import load_rollout_weights
from precision_engine.models import build_model, load_inventory
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.policy import load_policy
from precision_engine.rewrite import apply


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


@pytest.fixture(scope="module")
def plan():
    return compile_plan(load_policy("jetrl_unified"), load_inventory("tiny-qwen3"))


def _trained(plan):
    """A bf16 trainer after one optimizer step, so its weights are not the ones any fresh model starts from."""
    model = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=5)
    apply(plan, model, "train")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    model(ids, labels=ids).loss.backward()
    optimizer.step()
    return model


def _rollout_model(plan, seed=11):
    model = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=seed)
    apply(plan, model, "rollout")
    return model


def test_checkpoint_loads_bit_for_bit_and_rollout_matches_training(plan, tmp_path):
    trainer = _trained(plan)
    rollout = _rollout_model(plan)
    loaded = load_checkpoint(rollout, export_checkpoint(trainer, plan, tmp_path / "ckpt"))
    assert "model.layers.0.self_attn.q_proj.weight_scale_inv" in loaded
    for name, module in trainer.named_modules():
        if isinstance(module, Fp8Linear):
            got, want = rollout.get_submodule(name).quantized_weight(), module.quantized_weight()
            assert torch.equal(_bytes(got.data), _bytes(want.data)) and torch.equal(got.scale, want.scale), name
    ids = torch.randint(0, 512, (3, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        trainer_logits = trainer(ids).logits
        rollout_logits = rollout(ids).logits
    assert torch.equal(trainer_logits, rollout_logits)  # jetrl_unified: the same numerics, bitwise on the CPU


def test_in_process_sync_equals_checkpoint(plan):
    trainer = _trained(plan)
    rollout = _rollout_model(plan)
    load_rollout_weights(rollout, iter_rollout_weights(trainer, plan))
    name = "model.layers.1.mlp.down_proj"
    assert torch.equal(_bytes(rollout.get_submodule(name).quantized_weight().data),
                       _bytes(trainer.get_submodule(name).quantized_weight().data))


def test_a_nan_weight_is_refused_before_any_tensor_streams(plan):
    """In process the receiving engine may be SGLang's, which would serve a NaN block without a word."""
    trainer = _trained(plan)
    with torch.no_grad():
        trainer.model.layers[1].mlp.down_proj.weight[2, 5] = float("nan")
    with pytest.raises(NonFiniteError, match=r"model.layers.1.mlp.down_proj.weight: 1 of \d+ values are NaN or Inf"):
        next(iter_rollout_weights(trainer, plan))


def test_pinned_bytes_give_way_after_a_weight_update(plan):
    rollout = _rollout_model(plan)
    load_rollout_weights(rollout, iter_rollout_weights(_trained(plan), plan))
    linear = rollout.get_submodule("model.layers.0.mlp.up_proj")
    pinned = linear.quantized_weight()
    with torch.no_grad():
        linear.weight.mul_(2)
    assert linear.quantized_weight() is not pinned
    assert torch.equal(linear.quantized_weight().scale, pinned.scale * 2)


def test_mismatched_weights_are_refused_before_anything_is_written(plan):
    trainer = _trained(plan)
    rollout = _rollout_model(plan)
    before = {n: p.clone() for n, p in rollout.state_dict().items()}
    weights = dict(iter_rollout_weights(trainer, plan))
    weights["model.norm.weight"] = torch.ones(7, dtype=torch.bfloat16)
    weights["model.not_there.weight"] = torch.ones(3)
    with pytest.raises(UsageError, match=r"model.norm.weight: shape \(7,\).*model.not_there.weight: not a"):
        load_rollout_weights(rollout, weights.items())
    assert all(torch.equal(p, before[n]) for n, p in rollout.state_dict().items())


def test_fp8_weights_for_a_bf16_model_are_refused(plan):
    plain = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=3)  # not rewritten for rollout
    with pytest.raises(UsageError, match="not an FP8 linear .*rewritten for the rollout phase"):
        load_rollout_weights(plain, iter_rollout_weights(_trained(plan), plan))


def test_a_bf16_export_loads_as_master_weights_and_quantizes_to_the_trainers_bytes(plan):
    """The BF16 baseline's export into a model rewritten for jetrl_unified: each FP8 linear takes the weight
    as its master weight and quantizes it itself, to the bytes the trainer's FP8 linear multiplies."""
    trainer = _trained(plan)
    rollout = _rollout_model(plan)
    bf16 = compile_plan(load_policy("bf16_baseline"), load_inventory("tiny-qwen3"))
    load_rollout_weights(rollout, iter_rollout_weights(trainer, bf16))
    for name, module in trainer.named_modules():
        if isinstance(module, Fp8Linear):
            got, want = rollout.get_submodule(name).quantized_weight(), module.quantized_weight()
            assert torch.equal(_bytes(got.data), _bytes(want.data)) and torch.equal(got.scale, want.scale), name


def test_quantized_weight_of_the_wrong_shape_is_refused(plan):
    linear = _rollout_model(plan).get_submodule("model.layers.0.self_attn.q_proj")
    weight = torch.zeros(linear.weight.shape, dtype=torch.float8_e4m3fn)
    with pytest.raises(OperandError, match="does not fit"):
        linear.load_quantized(weight, torch.ones(1, 1))


def test_a_model_on_the_meta_device_is_refused_not_loaded_into_nothing(plan):
    """A copy into a meta tensor does nothing: the load returned every name while the model held no weight."""
    rollout = build_model("tiny-qwen3", device="meta")
    apply(plan, rollout, "rollout")
    with pytest.raises(UsageError, match="model on the meta device .*to_empty"):
        load_rollout_weights(rollout, iter_rollout_weights(_trained(plan), plan))


def test_bf16_moe_experts_arrive_per_expert_and_load_into_the_fused_parameters(tmp_path):
    """The export writes HF's per-expert names; the loader refused every one as "not a parameter" (no MoE
    checkpoint could be loaded). Stacked back, the rollout model holds the trainer's experts exactly; an
    incomplete set is refused by name."""
    moe = compile_plan(load_policy("jetrl_unified"), load_inventory("tiny-qwen3-moe"))
    trainer = build_model("tiny-qwen3-moe", device="cpu", dtype="bf16", seed=5)
    apply(moe, trainer, "train")
    rollout = build_model("tiny-qwen3-moe", device="cpu", dtype="bf16", seed=11)
    apply(moe, rollout, "rollout")
    load_checkpoint(rollout, export_checkpoint(trainer, moe, tmp_path / "moe"))
    experts = "model.layers.1.mlp.experts"
    for param in ("gate_up_proj", "down_proj"):
        assert torch.equal(rollout.get_parameter(f"{experts}.{param}"), trainer.get_parameter(f"{experts}.{param}"))
    weights = dict(iter_rollout_weights(trainer, moe))
    del weights[f"{experts}.3.up_proj.weight"]
    with pytest.raises(UsageError, match=rf"{experts}: 1 expert weight\(s\) missing \({experts}.3.up_proj.weight\)"):
        load_rollout_weights(rollout, weights.items())
