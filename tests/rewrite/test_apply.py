"""Rewrites on tiny Llama / Qwen3 models with random weights: the report is the plan, parameters are shared,
training still works, and the FP8 model stays close to BF16."""


import pytest
import torch
from torch import nn

from precision_engine.compile import compile_plan
from precision_engine.errors import ModelError, UnsupportedError, UsageError
from precision_engine.models import build_model, load_inventory
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.policy import load_policy
from precision_engine.rewrite import RewriteReport, apply, restore

from helpers import sqnr_db

MODELS = ("tiny-llama", "tiny-qwen3")

# FP8 W8A8 (128x128 weights, 1x128 activations) vs the same BF16 model, random init, 2x48 tokens:
# measured 21.4-22.5 dB on the logits; BF16 itself is ~41-43 dB from FP32.
LOGITS_SQNR_FLOOR_DB = 18.0


@pytest.fixture(scope="module")
def policies():
    return {name: load_policy(name) for name in ("jetrl_unified", "fp8_rollout_naive")}


@pytest.fixture(scope="module")
def plans(policies):
    return {
        (policy, spec): compile_plan(policies[policy], load_inventory(spec)) for policy in policies for spec in MODELS
    }


def tokens(batch=2, seq=48, seed=1):
    return torch.randint(0, 512, (batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("spec", MODELS)
@pytest.mark.parametrize("policy", ["jetrl_unified", "fp8_rollout_naive"])
@pytest.mark.parametrize("phase", ["train", "rollout"])
def test_report_equals_plan(plans, spec, policy, phase):
    plan = plans[(policy, spec)]
    model = build_model(spec, device="meta")
    report = apply(plan, model, phase)
    assert report == RewriteReport.from_plan(phase, plan.phases[phase])
    assert report.matches(plan.phases[phase])
    fp8 = {name for name, m in model.named_modules() if isinstance(m, Fp8Linear)}
    assert fp8 == {m.module.name for m in plan.phases[phase].modules if m.is_fp8}
    assert set(report.changed) == fp8
    for name in fp8:
        assert model.get_submodule(name).spec == plan.phases[phase].by_name[name].linear


def test_idempotent_and_phase_switch(plans):
    plan = plans[("fp8_rollout_naive", "tiny-llama")]
    model = build_model("tiny-llama", device="meta")
    rollout = apply(plan, model, "rollout")
    assert rollout.linears and apply(plan, model, "rollout").changed == ()
    train = apply(plan, model, "train")  # naive trains in BF16: every FP8 linear goes back to nn.Linear
    assert not train.linears and set(train.changed) == set(rollout.linears)
    assert not any(isinstance(m, Fp8Linear) for m in model.modules())


def test_parameters_shared_and_restore(plans):
    model = build_model("tiny-llama", device="cpu", dtype="bf16")
    params_before = dict(model.named_parameters())
    keys_before = list(model.state_dict())
    apply(plans[("jetrl_unified", "tiny-llama")], model, "train")
    assert list(model.state_dict()) == keys_before
    assert all(p is params_before[name] for name, p in model.named_parameters())
    restored = restore(model)
    assert len(restored) == 14 and not any(isinstance(m, Fp8Linear) for m in model.modules())
    assert all(p is params_before[name] for name, p in model.named_parameters())
    assert all(type(model.get_submodule(name)) is nn.Linear for name in restored)


def test_state_dict_round_trip(plans):
    plan = plans[("jetrl_unified", "tiny-qwen3")]
    source = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=1)
    apply(plan, source, "train")
    target = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=2)
    apply(plan, target, "train")
    target.load_state_dict(source.state_dict())
    for (name, a), b in zip(source.state_dict().items(), target.state_dict().values(), strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name
    plain = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=3)  # and into a model never rewritten
    plain.load_state_dict(source.state_dict())
    with torch.no_grad():
        x = tokens()
        apply(plan, plain, "rollout")
        source.eval()
        assert torch.equal(plain(x).logits, source(x).logits)


@pytest.mark.parametrize("spec", MODELS)
def test_fp8_logits_close_to_bf16(plans, spec):
    model = build_model(spec, device="cpu", dtype="bf16")
    x = tokens()
    with torch.no_grad():
        ref = model(x).logits
        apply(plans[("jetrl_unified", spec)], model, "rollout")
        out = model(x).logits
    assert torch.isfinite(out).all()
    assert sqnr_db(ref, out) >= LOGITS_SQNR_FLOOR_DB


def test_optimizer_step_through_rewritten_model(plans):
    """An optimizer built BEFORE the rewrite keeps working: its param groups hold the same tensors."""
    model = build_model("tiny-llama", device="cpu", dtype="bf16").train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    apply(plans[("jetrl_unified", "tiny-llama")], model, "train")
    q_proj = model.get_submodule("model.layers.0.self_attn.q_proj")
    w_fp8_before = q_proj.quantized_weight().data.clone()
    weight_before = q_proj.weight.detach().clone()
    x = tokens()
    loss = nn.functional.cross_entropy(model(x).logits[:, :-1].flatten(0, 1).float(), x[:, 1:].flatten())
    loss.backward()
    assert q_proj.weight.grad is not None and torch.isfinite(q_proj.weight.grad).all()
    assert q_proj.weight.grad.abs().sum() > 0
    optimizer.step()
    assert not torch.equal(q_proj.weight, weight_before)
    # the FP8 weight follows the master weight after the step (quantized once per weight version)
    assert not torch.equal(q_proj.quantized_weight().data.view(torch.uint8), w_fp8_before.view(torch.uint8))


def test_fp32_master_weights_under_autocast(plans):
    """FP32 master weights are never cast by the rewrite; BF16 compute comes from autocast, as in trainers."""
    model = build_model("tiny-llama", device="cpu", dtype="fp32").train()
    apply(plans[("jetrl_unified", "tiny-llama")], model, "train")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens()).logits
    logits.float().sum().backward()
    q_proj = model.get_submodule("model.layers.0.self_attn.q_proj")
    assert q_proj.weight.dtype == torch.float32 and q_proj.weight.grad.dtype == torch.float32
    assert torch.isfinite(q_proj.weight.grad).all()


def test_train_mode_and_requires_grad_kept(plans):
    model = build_model("tiny-llama", device="cpu", dtype="bf16").train()
    model.get_submodule("model.layers.1.mlp").eval()
    apply(plans[("jetrl_unified", "tiny-llama")], model, "train")
    assert model.get_submodule("model.layers.0.mlp.up_proj").training
    assert not model.get_submodule("model.layers.1.mlp.up_proj").training
    assert all(p.requires_grad for p in model.parameters())


def test_unknown_phase_and_foreign_model(plans):
    plan = plans[("jetrl_unified", "tiny-llama")]
    model = build_model("tiny-llama", device="meta")
    with pytest.raises(UsageError, match="unknown phase"):
        apply(plan, model, "eval")
    model.model.layers[0].mlp.down_proj = nn.Identity()
    with pytest.raises(ModelError, match="down_proj"):
        apply(plan, model, "train")
    assert not any(isinstance(m, Fp8Linear) for m in model.modules())  # refused before touching anything


@pytest.mark.gpu
def test_cuda_rewrite_forward(plans):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    model = build_model("tiny-llama", device="cuda", dtype="bf16")
    x = tokens().cuda()
    with torch.no_grad():
        ref = model(x).logits
        apply(plans[("jetrl_unified", "tiny-llama")], model, "rollout")
        out = model(x).logits
    assert sqnr_db(ref, out) >= LOGITS_SQNR_FLOOR_DB


def test_reapply_with_other_numerics_updates_modules(plans):
    """Same specs, different `numerics` (e.g. a policy switching nonfinite to error): the modules must follow."""
    from precision_engine.policy.model import NonFinite, NumericsSpec

    plan = plans[("jetrl_unified", "tiny-llama")]
    model = build_model("tiny-llama", device="meta")
    apply(plan, model, "train")
    strict = NumericsSpec(nonfinite=NonFinite.ERROR)
    report = apply(plan, model, "train", numerics=strict)
    assert report.changed
    assert all(m.numerics == strict for m in model.modules() if isinstance(m, Fp8Linear))
    assert apply(plan, model, "train", numerics=strict).changed == ()


def test_hooks_survive_the_rewrite_and_its_undoing(plans):
    """A forward hook, a pre-hook and a state_dict hook on a swapped module keep firing on its replacement (and
    their handles still remove them); an instance-level forward (accelerate's dispatch) is refused up front."""
    model = build_model("tiny-llama", device="cpu", dtype="bf16")
    q_proj = model.get_submodule("model.layers.0.self_attn.q_proj")
    calls = []
    q_proj.register_forward_pre_hook(lambda m, args: calls.append(("pre", type(m).__name__)))
    handle = q_proj.register_forward_hook(lambda m, args, out: calls.append(("post", type(m).__name__)))
    apply(plans[("jetrl_unified", "tiny-llama")], model, "train")
    model(tokens(seq=8))
    assert calls == [("pre", "Fp8Linear"), ("post", "Fp8Linear")]
    restore(model)
    handle.remove()
    calls.clear()
    model(tokens(seq=8))
    assert calls == [("pre", "Linear")]

    dispatched = build_model("tiny-llama", device="cpu", dtype="bf16")
    o_proj = dispatched.get_submodule("model.layers.1.self_attn.o_proj")
    o_proj.forward = lambda x: nn.Linear.forward(o_proj, x)  # as accelerate's add_hook_to_module does
    with pytest.raises(UnsupportedError, match=r"model.layers.1.self_attn.o_proj: its forward is replaced"):
        apply(plans[("jetrl_unified", "tiny-llama")], dispatched, "train")
    assert not any(isinstance(m, Fp8Linear) for m in dispatched.modules())  # nothing swapped


def test_a_plan_for_another_model_is_refused_before_anything_is_swapped(plans):
    """A tiny-llama plan on a model with one more layer would have left that layer's linears BF16, unreported,
    and an export would not have listed them as unquantized."""
    model = build_model("tiny-llama", device="cpu", dtype="bf16")
    model.model.layers.append(build_model("tiny-llama", device="cpu", dtype="bf16").model.layers[0])
    with pytest.raises(ModelError, match=r"compiled for another model: it does not know model.layers.2.self_attn"):
        apply(plans[("jetrl_unified", "tiny-llama")], model, "rollout")
    assert not any(isinstance(m, Fp8Linear) for m in model.modules())


def test_a_spec_the_kernels_refuse_is_named_before_anything_is_swapped():
    """compile_plan alone does not run validate's model checks: apply names every module whose spec Fp8Linear
    would refuse, instead of failing on the first after swapping the ones before it."""
    policy = load_policy("jetrl_unified", overrides=["formats.w64={dtype: float8_e4m3, granularity: block, "
                                                     "block: [64, 64]}", "rules.unified[1].linear.weight=w64"])
    model = build_model("tiny-llama", device="cpu", dtype="bf16")
    with pytest.raises(UnsupportedError, match=r"model.layers.0.self_attn.q_proj, .*: the FP8 GEMMs take weights"):
        apply(compile_plan(policy, load_inventory("tiny-llama")), model, "rollout")
    assert not any(isinstance(m, Fp8Linear) for m in model.modules())
