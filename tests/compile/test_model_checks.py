"""model_diagnostics: rules that reach nothing, and FP8 tiles that do not fit a module's shape."""

from dataclasses import replace

from compile_policies import JET_SPEC, make_policy, rule

from precision_engine.compile import model_diagnostics
from precision_engine.numerics.formats import Granularity, QuantFormat


def one_set(*rules):
    return make_policy({"r": rules}, {"train": "r", "rollout": "r"})


def test_clean_policy_has_no_diagnostics(unified, llama8b, moe30b):
    assert model_diagnostics(unified, llama8b) == []
    assert model_diagnostics(unified, moe30b) == []


def test_rule_matching_nothing_is_a_located_warning(tiny_moe):
    policy = one_set(rule("r[0]", "re:.*_proj", linear=JET_SPEC), rule("r[1]", "model.decoder.*", line=7))
    [diag] = model_diagnostics(policy, tiny_moe)
    assert diag.severity == "warning" and (diag.file, diag.line, diag.column) == ("p.yaml", 7, 5)
    assert diag.key_path == "rules.r[1].match"
    assert "matches no module of tiny-qwen3-moe" in diag.message


def test_shadowed_rule_is_reported(tiny_moe):
    policy = one_set(rule("r[0]", "re:.*_proj", linear=JET_SPEC), rule("r[1]", "*.q_proj", line=4))
    [diag] = model_diagnostics(policy, tiny_moe)
    assert diag.key_path == "rules.r[1].match" and "never applies" in diag.message


def test_linear_rule_over_norms_is_a_warning(tiny_moe):
    [diag] = model_diagnostics(one_set(rule("r[0]", "*", linear=JET_SPEC)), tiny_moe)
    assert diag.severity == "warning"
    assert "embedding/norm/router" in diag.message and "model.layers.{0,1}.self_attn.q_norm" in diag.message


def test_block_that_does_not_tile_is_an_error_naming_module_and_shape(llama8b):
    spec = replace(JET_SPEC, weight=QuantFormat(JET_SPEC.weight.dtype, Granularity.BLOCK, block=(128, 96)))
    diags = model_diagnostics(one_set(rule("r[0]", "*.mlp.down_proj", linear=spec)), llama8b)
    [diag] = [d for d in diags if d.severity == "error"]
    assert diag.key_path == "rules.r[0].linear"
    assert diag.message == (
        "weight blocks 128x96 do not tile the [N, K] = [4096, 14336] weight of model.layers.{0..31}.mlp.down_proj"
    )


def test_group_size_checked_on_both_expert_gemms(tiny_moe):
    act256 = QuantFormat(JET_SPEC.input.dtype, Granularity.GROUP, group=256)
    spec = replace(JET_SPEC, input=act256, grad_output=act256)
    diags = model_diagnostics(one_set(rule("r[0]", "*.experts", linear=spec)), tiny_moe)
    messages = sorted(d.message for d in diags)
    # tiny MoE: gate_up_proj [256, 256] fits; down_proj [N=256, K=128] has K=128 < 256
    assert messages == ["input groups of 256 do not divide K = 128 of model.layers.{0,1}.mlp.experts.down_proj"]
