"""`extends`: RFC 7386 merge, shipped names and relative paths, cycles and missing bases named clearly."""

from __future__ import annotations

import pytest

from precision_engine.policy import check_policy, load_policy
from precision_engine.policy.extends import MAX_EXTENDS_FILES, merge_patch

BASE = """\
version: 1
name: base
formats:
  w8: {dtype: float8_e4m3, granularity: block, block: [128, 128]}
rules:
  main:
    - match: [lm_head]
      compute: fp32
phases: {train: main, rollout: main}
kv_cache: {dtype: float8_e4m3, calibrate: every_weight_update}
correction: {importance_sampling: {threshold: 3.0}}
"""


def test_merge_patch_semantics():
    base = {"a": {"x": 1, "y": [1, 2]}, "b": 1, "c": {"d": 1}}
    patch = {"a": {"y": [3], "z": 2}, "b": None, "c": 5}
    assert merge_patch(base, patch) == {"a": {"x": 1, "y": [3], "z": 2}, "c": 5}
    assert base == {"a": {"x": 1, "y": [1, 2]}, "b": 1, "c": {"d": 1}}  # inputs untouched


def test_child_merges_over_base_and_null_removes(tmp_policy):
    tmp_policy("base.yaml", BASE)
    child = tmp_policy("child.yaml", """\
name: child
extends: ./base.yaml
kv_cache: {dtype: bf16, calibrate: never}
correction: null
rules:
  main: [{match: ["*"], compute: bf16}]
""")
    policy = load_policy(child)
    assert policy.name == "child" and "w8" in policy.formats
    assert policy.kv_cache.dtype.value == "bf16"
    assert policy.correction.importance_sampling is None
    assert [r.match for r in policy.rules_for("train")] == [("*",)]  # lists replace, never splice
    assert "extends" not in policy.resolved


def test_list_merges_left_to_right_then_the_file(tmp_policy):
    tmp_policy("base.yaml", BASE)
    tmp_policy("second.yaml", "kernel: triton\nmaster_weights: bf16\n")
    child = tmp_policy("child.yaml", "name: child\nextends: [./base.yaml, ./second.yaml]\nkernel: cublas\n")
    policy = load_policy(child)
    assert (policy.kernel.value, policy.master_weights.value) == ("cublas", "bf16")


def test_relative_paths_resolve_against_the_file_not_the_cwd(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "base.yaml").write_text(BASE)
    (tmp_path / "sub" / "child.yaml").write_text("name: child\nextends: base.yaml\n")
    monkeypatch.chdir(tmp_path)
    assert load_policy("sub/child.yaml").name == "child"


def test_shipped_base_by_name(tmp_policy):
    policy = load_policy(tmp_policy("mine.yaml", "name: mine\nextends: jetrl_unified\nkernel: triton\n"))
    linear = policy.rules_for("train")[1].linear
    assert linear.kernel.value == "triton"  # the policy-wide kernel reaches every quantized linear


def test_two_file_cycle_names_the_chain(tmp_policy, monkeypatch):
    a = tmp_policy("a.yaml", "name: a\nextends: ./b.yaml\n")
    tmp_policy("b.yaml", "name: b\nextends: ./a.yaml\n")
    monkeypatch.chdir(a.parent)
    result = check_policy("a.yaml")
    assert [str(d) for d in result.diagnostics] == [
        "b.yaml:2:10: error: extends: extends cycle: a.yaml -> b.yaml -> a.yaml (hint: remove one of these extends)"]


def test_error_in_base_points_into_the_base(tmp_policy, monkeypatch):
    tmp_policy("base.yaml", BASE.replace("granularity: block", "granularity: blok"))
    child = tmp_policy("child.yaml", "name: child\nextends: ./base.yaml\n")
    monkeypatch.chdir(child.parent)
    (diagnostic,) = check_policy("child.yaml").diagnostics
    assert (diagnostic.file, diagnostic.line, diagnostic.key_path) == ("base.yaml", 4, "formats.w8.granularity")
    assert diagnostic.hint == "did you mean 'block'?"


def test_missing_base_suppresses_follow_on_errors_but_keeps_the_files_own(tmp_policy):
    child = tmp_policy("child.yaml", "name: child\nextends: ./nope.yaml\nkernel: fast\n")
    messages = [d.message for d in check_policy(child).diagnostics]
    assert len(messages) == 2
    assert messages[0].startswith("extends target './nope.yaml' not found")
    assert messages[1].startswith("unknown value 'fast'")


def test_directory_as_base_is_named_a_directory(tmp_policy, tmp_path):
    (tmp_path / "bases.yaml").mkdir()
    child = tmp_policy("child.yaml", "name: child\nextends: ./bases.yaml\n")
    (diagnostic,) = check_policy(child).diagnostics
    assert diagnostic.message.startswith("extends target './bases.yaml' is a directory, not a policy file")


def test_base_with_broken_yaml_is_reported_once(tmp_policy):
    tmp_policy("base.yaml", "version: [1\n")
    child = tmp_policy("child.yaml", "name: child\nextends: ./base.yaml\n")
    (diagnostic,) = check_policy(child).diagnostics
    assert diagnostic.file.endswith("base.yaml") and "invalid YAML" in diagnostic.message


@pytest.mark.parametrize("refs", ["./p{next}.yaml", "[./p{next}.yaml, ./p{next}.yaml, ./p{next}.yaml]"],
                         ids=["long chain", "diamonds"])
def test_extends_stops_at_the_file_limit(refs, tmp_policy):
    # A 1000-file chain was a RecursionError traceback; 30 levels of 3-way diamonds, 3**30 loads.
    depth = 1000 if refs.startswith("./") else 30
    for i in range(depth):
        tmp_policy(f"p{i}.yaml", f"extends: {refs.format(next=i + 1)}\n")
    last = tmp_policy(f"p{depth}.yaml", "name: last\nextends: bf16_baseline\n")
    (diagnostic,) = check_policy(last.parent / "p0.yaml").diagnostics
    assert diagnostic.message.startswith(f"extends pulls in more than {MAX_EXTENDS_FILES} files (in a base of ")


def test_name_and_description_are_not_inherited(tmp_policy):
    """An ablation that extends a shipped policy is reported under its own name, never its parent's."""
    child = tmp_policy("no_tis.yaml", "extends: fp8rl_rollout_tis\ncorrection: null\n")
    policy = load_policy(child)
    assert policy.name == "no_tis" and policy.description == ""
    assert policy.kv_cache.is_fp8  # everything else still comes from the base
    named = tmp_policy("named.yaml", "extends: fp8rl_rollout_tis\nname: my_run\ndescription: mine\n")
    assert (load_policy(named).name, load_policy(named).description) == ("my_run", "mine")


def test_extends_a_shipped_name_with_yaml_hints_at_the_name(tmp_path):
    (tmp_path / "child.yaml").write_text("extends: jetrl_unified.yaml\nname: child\n")
    (error,) = check_policy(tmp_path / "child.yaml").errors
    assert "not found" in error.message and error.hint == "a shipped policy is named without .yaml: extends: " \
                                                          "jetrl_unified"
