"""diff_policies on resolved documents and diff_plans on compiled plans, including the shipped policies."""

from dataclasses import replace

import pytest
from compile_policies import make_policy

from precision_engine.compile import compile_plan, diff_plans, diff_policies
from precision_engine.numerics.formats import Kernel
from precision_engine.policy import load_policy


def with_doc(doc: dict):
    return replace(make_policy({}, {}), resolved=doc)


def test_document_diff_paths_kinds_and_order():
    old = {
        "name": "a",
        "formats": {"w8": {"dtype": "float8_e4m3", "block": [128, 128]}},
        "rules": {
            "r": [{"match": ["lm_head"], "compute": "bf16"}, {"match": ["re:.*_proj"], "linear": {"weight": "w8"}}]
        },
        "kv_cache": {"dtype": "bf16"},
    }
    new = {
        "name": "b",
        "formats": {"w8": {"dtype": "float8_e4m3", "block": [128, 64]}, "a8": {"dtype": "float8_e4m3"}},
        "rules": {"r": [{"match": ["lm_head", "re:.*norm"], "compute": "bf16"}]},
    }
    diff = diff_policies(with_doc(old), replace(with_doc(new), kernel=Kernel.TRITON))  # builds another policy
    assert [(c.path, c.kind, c.old, c.new, c.metadata) for c in diff.changes] == [
        ("name", "changed", "a", "b", True),
        ("formats.w8.block", "changed", [128, 128], [128, 64], False),
        ("formats.a8.dtype", "added", None, "float8_e4m3", False),
        ("rules.r[0].match", "changed", ["lm_head"], ["lm_head", "re:.*norm"], False),
        ("rules.r[1].match", "removed", ["re:.*_proj"], None, False),
        ("rules.r[1].linear.weight", "removed", "w8", None, False),
        ("kv_cache.dtype", "removed", "bf16", None, False),
    ]
    assert not diff.same


def test_metadata_only_changes_are_the_same_policy():
    diff = diff_policies(with_doc({"name": "a", "description": "x", "v": 1}), with_doc({"name": "b", "v": 1}))
    assert len(diff.changes) == 2 and diff.same
    assert diff_policies(with_doc({"v": 1}), with_doc({"v": 1})).changes == ()


def test_plan_diff_groups_by_numerics(naive, unified, llama8b):
    diff = diff_plans(compile_plan(naive, llama8b), compile_plan(unified, llama8b))
    assert not diff.same and diff.changed("train") == 224 and diff.changed("rollout") == 0
    [group] = diff.phases["train"]
    assert group.old.linear is None and group.new.is_fp8 and len(group.names) == 224
    assert diff.identical_before == (291 - 224, 291) and diff.identical_after == (291, 291)


def test_plan_diff_ignores_rule_labels(unified, llama8b):
    rules = tuple(replace(r, label=f"u[{i}]") for i, r in enumerate(unified.rule_sets["unified"]))
    relabelled = replace(unified, rule_sets={"u": rules}, phases={"train": "u", "rollout": "u"})
    assert diff_plans(compile_plan(unified, llama8b), compile_plan(relabelled, llama8b)).same


@pytest.fixture(scope="module")
def shipped():
    names = ("bf16_baseline", "fp8_rollout_naive", "jetrl_unified", "jetrl_unified_kv")
    return {name: load_policy(name) for name in names}


def test_shipped_naive_vs_unified_differs_in_train_phase_only(shipped, llama8b):
    plans = {name: compile_plan(policy, llama8b) for name, policy in shipped.items()}
    diff = diff_plans(plans["fp8_rollout_naive"], plans["jetrl_unified"])
    assert diff.changed("train") == 224 and diff.changed("rollout") == 0
    assert not diff_policies(shipped["fp8_rollout_naive"], shipped["jetrl_unified"]).same


def test_shipped_kv_variant_changes_no_module_but_the_document(shipped, llama8b):
    unified, with_kv = shipped["jetrl_unified"], shipped["jetrl_unified_kv"]
    assert diff_plans(compile_plan(unified, llama8b), compile_plan(with_kv, llama8b)).same
    paths = {c.path for c in diff_policies(unified, with_kv).changes if not c.metadata}
    assert "kv_cache.dtype" in paths


def test_shipped_baseline_vs_unified_changes_both_phases(shipped, llama8b):
    diff = diff_plans(compile_plan(shipped["bf16_baseline"], llama8b), compile_plan(shipped["jetrl_unified"], llama8b))
    assert diff.changed("train") == 224 and diff.changed("rollout") == 224


def test_documents_that_build_the_same_policy_are_equivalent(tmp_path):
    """Defaults spelled out or left implicit, `'*'` for `['*']`, a preset for an identical named format: the
    documents differ key by key, and the diff says the policies are the same (it said "different")."""
    minimal = tmp_path / "minimal.yaml"
    minimal.write_text("version: 1\nname: bf16_baseline\nrules:\n  bf16:\n    - match: '*'\n"
                       "phases: {train: bf16, rollout: bf16}\n")
    diff = diff_policies(load_policy("bf16_baseline"), load_policy(minimal))
    assert diff.equivalent and diff.same and any(not change.metadata for change in diff.changes)
    presets = load_policy("jetrl_unified", overrides=("rules.unified[1].linear.weight=fp8_block_weight",))
    assert diff_policies(load_policy("jetrl_unified"), presets).same
    assert not diff_policies(load_policy("jetrl_unified"), load_policy("jetrl_unified_kv")).equivalent
