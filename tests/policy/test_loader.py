"""The public loader: PolicyError with every error, usage errors for missing files, a frozen Policy."""

from __future__ import annotations

import dataclasses

import pytest

from precision_engine.errors import PolicyError, UsageError
from precision_engine.policy import Diagnostic, check_policy, load_policy, validate_files


def test_policy_error_carries_every_diagnostic(tmp_policy):
    path = tmp_policy("bad.yaml", """\
version: 1
name: bad
kernal: auto
rules: {main: [{match: [lm_head], compute: fp8}]}
phases: {train: main, rollout: mian}
""")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert [(d.line, d.key_path) for d in info.value.diagnostics] == [
        (3, "kernal"), (4, "rules.main[0].compute"), (5, "phases.rollout")]
    assert str(info.value).count("\n") == 2


def test_warnings_do_not_stop_loading(tmp_policy):
    path = tmp_policy("warn.yaml", """\
version: 1
name: warn
rules: {main: [{match: [lm_head]}, {match: [lm_head]}]}
phases: {train: main, rollout: main}
""")
    result = check_policy(path)
    assert result.policy is not None and result.ok() and not result.ok(strict=True)
    assert load_policy(path).name == "warn"


def test_missing_file_is_a_usage_error_with_shipped_names():
    with pytest.raises(UsageError, match="policy file not found: nope.yaml .*jetrl_unified"):
        load_policy("nope.yaml")
    with pytest.raises(UsageError, match="did you mean 'jetrl_unified'"):
        load_policy("jetrl_unifed")


def test_a_directory_is_a_usage_error_that_says_so(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="is a directory, not a policy file"):  # was "policy file not found"
        validate_files([tmp_path])
    with pytest.raises(UsageError, match="is a directory"):
        load_policy(tmp_path)
    with pytest.raises(UsageError, match="policy file not found"):  # "" is not the working directory
        validate_files([""])
    (tmp_path / "jetrl_unified").mkdir()  # a shipped name still wins over a directory of that name
    monkeypatch.chdir(tmp_path)
    assert load_policy("jetrl_unified").name == "jetrl_unified"


def test_validate_files_checks_every_file_exists_first(tmp_policy):
    good = tmp_policy("good.yaml", "name: good\nextends: bf16_baseline\n")
    with pytest.raises(UsageError, match="missing1.yaml, missing2.yaml"):
        validate_files([good, "missing1.yaml", "missing2.yaml"])
    (result,) = validate_files([good])
    assert result.ok(strict=True)


def test_rules_carry_labels_and_source_locations():
    rules = load_policy("jetrl_unified").rules_for("rollout")
    assert [r.label for r in rules] == ["unified[0]", "unified[1]"]
    assert rules[1].location.file.endswith("jetrl_unified.yaml")
    assert (rules[1].location.line, rules[1].location.column) == (28, 7)


def test_policy_is_frozen_and_resolved_is_the_merged_document():
    policy = load_policy("jetrl_unified_kv")
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.name = "x"
    with pytest.raises(TypeError):
        policy.formats["new"] = policy.formats["w8"]
    assert policy.resolved["kv_cache"]["dtype"] == "float8_e4m3"
    assert policy.resolved["rules"]["unified"][1]["linear"]["wgrad_operands"] == "t8"
    assert policy.source.name == "jetrl_unified_kv.yaml"


def test_diagnostic_text_and_dict():
    diagnostic = Diagnostic("error", "unknown key 'x'", "p.yaml", 3, 5, "formats.w8.x", "did you mean 'y'?")
    assert str(diagnostic) == "p.yaml:3:5: error: formats.w8.x: unknown key 'x' (hint: did you mean 'y'?)"
    assert str(Diagnostic("warning", "m")) == "warning: m"
    assert diagnostic.to_dict()["line"] == 3
