"""Collapsing repeated layers, labels, and the JSON form of a plan."""

import json

from precision_engine.compile import compile_plan
from precision_engine.compile.render import (
    collapse,
    collapse_names,
    numerics_label,
    plan_to_dict,
    policy_lines,
    shape_label,
)
from precision_engine.policy import load_policy


def test_collapse_layers_into_ranges():
    names = [f"model.layers.{i}.mlp.up_proj" for i in range(32)] + ["lm_head"]
    assert collapse_names(names) == ["model.layers.{0..31}.mlp.up_proj", "lm_head"]
    assert collapse_names(["a.0.x", "a.2.x", "a.3.x", "a.4.x", "a.1.y"]) == ["a.{0,2..4}.x", "a.1.y"]


def test_collapse_keeps_rows_with_different_keys_apart():
    rows = [(f"layers.{i}.q", "fp8" if i else "bf16") for i in range(4)]
    assert collapse(rows) == [("layers.0.q", 1, "bf16"), ("layers.{1..3}.q", 3, "fp8")]


def test_collapse_never_claims_an_absent_module():
    names = ["l.0.e.0.w", "l.0.e.1.w", "l.1.e.0.w"]  # l.1.e.1.w does not exist
    assert collapse_names(names) == names
    assert collapse_names(names + ["l.1.e.1.w"]) == ["l.{0,1}.e.{0,1}.w"]


def test_labels(unified, moe30b):
    plan = compile_plan(unified, moe30b)
    experts = plan.phases["train"].by_name["model.layers.3.mlp.experts"]
    assert shape_label(experts.module) == "128x[1536x2048 | 2048x768] top8"
    assert numerics_label(experts, "train") == (
        "W e4m3 128x128 · X e4m3 1x128 · dY e4m3 1x128 · wgrad e4m3 128x1 · bf16 · auto"
    )
    assert numerics_label(experts, "rollout") == "W e4m3 128x128 · X e4m3 1x128 · bf16 · auto"
    assert numerics_label(plan.phases["train"].by_name["lm_head"], "train") == "bf16 (not quantized)"


def test_plan_json_is_complete_and_serializable(unified, llama8b):
    data = json.loads(json.dumps(plan_to_dict(compile_plan(unified, llama8b), ["train", "rollout"])))
    assert data["identical"] is True and data["differing"] == []
    modules = data["phases"]["train"]["modules"]
    assert len(modules) == 291 and sum(m["fp8"] for m in modules) == 224
    q = next(m for m in modules if m["name"] == "model.layers.0.self_attn.q_proj")
    assert q["linear"]["weight"] == {
        "dtype": "float8_e4m3", "granularity": "block", "group": None, "block": [128, 128], "axis": "k", "scale": "fp32"
    }
    assert q["rule"] == "unified[1]" and q["shape"] == [4096, 4096] and q["identical"] is True


def test_policy_lines_name_kv_cache_correction_and_master_weights():
    assert policy_lines(load_policy("fp8rl_rollout_tis")) == [
        "rollout KV cache: float8_e4m3, per_tensor scales, calibrate: every_weight_update",
        "correction: token-level importance sampling, truncate at 2",
        "master weights: fp32",
    ]
    assert policy_lines(load_policy("jetrl_unified"))[:2] == ["rollout KV cache: bf16 (not quantized)", "correction: off"]


def test_verdict_says_what_check_measures(llama8b):
    """Identical plans promise the engine's sampled logprobs bitwise on the built-in backend, an FP8 KV cache
    included (the trainer rounds k/v too), never on verl/SGLang; differing plans keep k/v rounding rollout-only."""
    from precision_engine.compile.render import verdict_lines

    unified = verdict_lines(compile_plan(load_policy("jetrl_unified"), llama8b))
    with_kv = verdict_lines(compile_plan(load_policy("jetrl_unified_kv"), llama8b))
    tis = verdict_lines(compile_plan(load_policy("fp8rl_rollout_tis"), llama8b))
    assert unified[0].startswith("verdict: training forward and rollout numerics are IDENTICAL")
    assert with_kv[0] == unified[0]
    def text(lines):
        return " ".join(line.strip() for line in lines)

    for lines in (unified, with_kv):
        assert "decode through the" in text(lines) and "equal the trainer's bit for bit" in text(lines)
        assert "`precision check` measures it" in text(lines)
        assert "verl/SGLang does not make them bitwise" in text(lines)
    assert "the trainer rounds k/v with the rollout's scales" in text(with_kv)
    assert "FP8 KV" not in text(unified)
    assert tis[0].startswith("verdict: training forward and rollout numerics DIFFER")
    assert "FP8 KV cache rounds keys and values in rollout only" in text(tis)
    assert all(len(line) <= 80 for line in unified + with_kv + tis)
    assert not plan_to_dict(compile_plan(load_policy("jetrl_unified_kv"), llama8b), ["rollout"])[
        "kv_cache_rollout_only"
    ]
    assert plan_to_dict(compile_plan(load_policy("fp8rl_rollout_tis"), llama8b), ["rollout"])["kv_cache_rollout_only"]
