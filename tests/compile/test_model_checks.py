"""model_diagnostics: rules that reach nothing, FP8 tiles that do not fit a module's shape, and FP8 modules the
kernel table says cannot run in their phase."""

from dataclasses import replace

import pytest

from compile_policies import JET_SPEC, make_policy, rule

from precision_engine.compile import model_diagnostics
from precision_engine.numerics.formats import Granularity, QuantFormat


def one_set(*rules):
    return make_policy({"r": rules}, {"train": "r", "rollout": "r"})


def test_clean_policy_has_no_diagnostics(unified, naive, llama8b, moe30b):
    assert model_diagnostics(unified, llama8b) == []
    assert model_diagnostics(naive, moe30b) == []  # FP8 experts in rollout only: they run


def test_fp8_experts_in_training_are_refused_at_the_rule(unified, moe30b):
    """What `check -m tiny-qwen3-moe` would refuse (no grouped FP8 backward), validate and plan say first."""
    [diag] = model_diagnostics(unified, moe30b)
    assert diag.is_error and (diag.file, diag.line) == ("p.yaml", 12) and diag.key_path == "rules.unified[1].linear"
    assert "FP8 fused MoE experts run in the rollout phase only" in diag.message and "train phase" in diag.message
    assert "model.layers.{0..47}.mlp.experts" in diag.message


def test_formats_the_gemms_cannot_take_are_refused_at_the_operand(tiny_moe):
    wide = replace(JET_SPEC, weight=QuantFormat(JET_SPEC.weight.dtype, Granularity.BLOCK, block=(128, 256)),
                   input=replace(JET_SPEC.input, group=64))
    diags = model_diagnostics(one_set(rule("r[0]", "re:.*_proj", linear=wide)), tiny_moe)
    keys = {d.key_path: d.message for d in diags if d.is_error}
    assert "128x128 blocks, got e4m3 128x256" in keys["rules.r[0].linear.weight"]
    assert "1x128 groups along K, got e4m3 1x64" in keys["rules.r[0].linear.input"]


def test_rule_matching_nothing_is_a_located_warning(tiny_moe):
    policy = one_set(rule("r[0]", "re:.*_proj", linear=JET_SPEC), rule("r[1]", "model.decoder.*", line=7))
    [diag] = model_diagnostics(policy, tiny_moe)
    assert diag.severity == "warning" and (diag.file, diag.line, diag.column) == ("p.yaml", 7, 5)
    assert diag.key_path == "rules.r[1].match"
    assert "matches no module of tiny-qwen3-moe" in diag.message


def test_a_rule_whose_types_no_module_has_blames_its_types(tiny_moe):
    """`types: [linear]` (the class is `Linear`) was reported as a `match` problem with a module-name hint."""
    policy = one_set(rule("r[0]", types=("linear",), linear=JET_SPEC), rule("r[1]", "*"))
    [diag] = model_diagnostics(policy, tiny_moe)
    assert diag.key_path == "rules.r[0].types" and diag.message == "no module of tiny-qwen3-moe is a linear"
    assert diag.hint == "did you mean 'Linear'?"


def test_shadowed_rule_is_reported(tiny_moe):
    policy = one_set(rule("r[0]", "re:.*_proj", linear=JET_SPEC), rule("r[1]", "*.q_proj", line=4))
    [diag] = model_diagnostics(policy, tiny_moe)
    assert diag.key_path == "rules.r[1].match" and "never applies" in diag.message


def test_linear_rule_over_norms_is_a_warning(tiny_moe):
    found = model_diagnostics(one_set(rule("r[0]", "*", linear=JET_SPEC)), tiny_moe)
    [diag] = [d for d in found if not d.is_error]  # the error: FP8 experts in training
    assert diag.severity == "warning"
    assert "embedding/norm/router" in diag.message and "model.layers.{0,1}.self_attn.q_norm" in diag.message


def test_block_the_gemms_do_not_take_is_one_error_naming_the_modules(llama8b):
    """A format no kernel takes is refused once, at the operand, not once more per shape it fails to tile."""
    spec = replace(JET_SPEC, weight=QuantFormat(JET_SPEC.weight.dtype, Granularity.BLOCK, block=(128, 96)))
    diags = model_diagnostics(one_set(rule("r[0]", "*.mlp.down_proj", linear=spec)), llama8b)
    [diag] = [d for d in diags if d.severity == "error"]
    assert diag.key_path == "rules.r[0].linear.weight"
    assert diag.message == (
        "the FP8 GEMMs take weights in 128x128 blocks, got e4m3 128x96: model.layers.{0..31}.mlp.down_proj"
    )


def test_group_size_checked_for_input_and_grad_output(tiny_moe):
    act256 = QuantFormat(JET_SPEC.input.dtype, Granularity.GROUP, group=256)
    spec = replace(JET_SPEC, input=act256, grad_output=act256)
    diags = model_diagnostics(one_set(rule("r[0]", "*.self_attn.q_proj", linear=spec)), tiny_moe)
    assert sorted(d.key_path for d in diags) == ["rules.r[0].linear.grad_output", "rules.r[0].linear.input"]
    assert all("1x128 groups along K, got e4m3 1x256" in d.message for d in diags)


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
def test_an_empty_linear_is_one_error_not_a_crash_at_rewrite():
    """nn.Linear(0, n) is legal torch; an FP8 GEMM over it is not, so the rule that reaches it is refused."""
    from torch import nn

    from precision_engine.models.inventory import inventory_from_model

    model = nn.ModuleDict({"empty_proj": nn.Linear(0, 128), "up_proj": nn.Linear(128, 256)})
    inventory = inventory_from_model(model, model_id="empty", config={})
    [diag] = model_diagnostics(one_set(rule("r[0]", "*_proj", linear=JET_SPEC)), inventory)
    assert (diag.severity, diag.key_path) == ("error", "rules.r[0].linear")
    assert diag.message == "the [N, K] = [128, 0] weight is empty (an FP8 GEMM needs N, K >= 1) of empty_proj"
