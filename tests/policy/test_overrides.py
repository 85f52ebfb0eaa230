"""`--set key.path=value`: YAML values, created keys, list indices, null removal, located at the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from precision_engine.errors import UsageError
from precision_engine.policy import check_policy, load_policy
from precision_engine.policy.overrides import parse_key_path


def test_key_path_syntax():
    assert parse_key_path("rules.unified[1].linear.weight") == ("rules", "unified", 1, "linear", "weight")
    for bad in ("a..b", "a.[1]", "", "a b"):
        with pytest.raises(UsageError):
            parse_key_path(bad)


def test_scalar_flow_and_created_keys():
    policy = load_policy("fp8rl_rollout_tis", [
        "correction.importance_sampling.threshold=1.5",
        "formats.w8.block=[128, 64]",
        "formats.e5={dtype: float8_e5m2, granularity: tensor}",
        "numerics.nonfinite=error",
    ])
    assert policy.correction.importance_sampling.threshold == 1.5
    assert policy.formats["w8"].block == (128, 64)
    assert policy.formats["e5"].dtype.value == "float8_e5m2"
    assert policy.numerics.nonfinite.value == "error"


def test_list_index_and_merge_into_a_rule():
    policy = load_policy("jetrl_unified", ["rules.unified[1].linear.kernel=triton", "rules.unified[0].compute=fp32"])
    rules = policy.rules_for("train")
    assert rules[1].linear.kernel.value == "triton" and rules[1].linear.weight.block == (128, 128)
    assert rules[0].compute.value == "fp32"


def test_null_and_empty_value_remove_a_key():
    assert load_policy("fp8rl_rollout_tis", ["correction=null"]).correction.importance_sampling is None
    assert load_policy("fp8rl_rollout_tis", ["kv_cache="]).kv_cache.dtype.value == "bf16"


def test_diagnostics_point_at_the_flag_or_at_the_file(monkeypatch):
    monkeypatch.chdir(Path(__file__).parents[2])  # file names are shown relative to the working directory
    result = check_policy("jetrl_unified", ["kernel=cuda", "formats.a8.granularity=block"])
    file = "precision_engine/policies/jetrl_unified.yaml"
    assert [(d.file.replace("\\", "/"), d.line, d.key_path) for d in result.diagnostics] == [
        ("--set formats.a8.granularity=block", None, "formats.a8.granularity"),
        ("--set kernel=cuda", None, "kernel"),
        (file, 19, "formats.a8.group"),  # still the file's `group: 128`, now contradicting the flag
        (file, 29, "rules.unified[1].linear.input"),
        (file, 29, "rules.unified[1].linear.grad_output"),
    ]
    assert str(result.diagnostics[1]) == ("--set kernel=cuda: error: kernel: unknown value 'cuda'; expected one "
                                         "of: auto, cublas, cublas_pinned, triton, deep_gemm, reference, emulated (hint: did you "
                                         "mean 'cublas'?)")


def test_a_required_key_a_flag_removed_is_located_at_the_flag(tmp_path, monkeypatch):
    """The file has `rules` and `formats.w8.dtype`; the flags took them away, so the flags are to blame."""
    (rules,) = check_policy("jetrl_unified", ["rules=null"]).diagnostics
    assert (rules.file, rules.message) == ("--set rules=null", "missing required key 'rules'")
    dtype = check_policy("jetrl_unified", ["formats.w8.dtype=null"]).diagnostics[0]
    assert (dtype.file, dtype.key_path) == ("--set formats.w8.dtype=null", "formats.w8")
    (tmp_path / "no_version.yaml").write_text("name: x\nrules: {a: [{match: ['*'], compute: bf16}]}\n"
                                              "phases: {train: a, rollout: a}\n")
    monkeypatch.chdir(tmp_path)
    (version,) = check_policy("no_version.yaml").diagnostics  # never there: the file, as before
    assert (version.file, version.line, version.message) == ("no_version.yaml", 1, "missing required key 'version'")


def test_keys_created_by_a_flag_are_located_at_the_flag():
    # bf16_baseline has no `correction`: a warning about the one the flag creates must not point into the file
    (warning,) = check_policy("bf16_baseline", ["correction.importance_sampling.threshold=3"]).diagnostics
    assert (warning.key_path, warning.file) == ("correction.importance_sampling",
                                                "--set correction.importance_sampling.threshold=3")


def test_cannot_descend_into_a_scalar_or_missing_index():
    result = check_policy("jetrl_unified", ["kernel.x=1", "rules.unified[7].compute=fp32"])
    assert [d.message for d in result.errors] == [
        "cannot set a key under kernel: it is not a mapping",
        "cannot index rules.unified[7]: not an existing list element",
    ]


def test_malformed_flag_is_a_usage_error():
    with pytest.raises(UsageError, match="KEY.PATH=VALUE"):
        check_policy("jetrl_unified", ["kernel"])
    with pytest.raises(UsageError, match="`extends` cannot be overridden"):  # it was silently ignored
        check_policy("bf16_baseline", ["extends=jetrl_unified"])


def test_bad_yaml_value_is_a_policy_error():
    (diagnostic,) = check_policy("jetrl_unified", ["formats.w8.block=[128"]).diagnostics
    assert diagnostic.file == "--set formats.w8.block=[128" and "invalid YAML" in diagnostic.message


def test_a_flag_merging_a_mapping_is_blamed_only_for_the_keys_it_set(tmp_path, monkeypatch):
    """`--set formats.w8={scale: pow2}` took the blame for the file's own `granularity: blok`; and of two flags,
    the first was blamed for what the second set below the list element it merged."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fmt.yaml").write_text("extends: jetrl_unified\nname: fmt\nformats:\n"
                                       "  w8: {block: null, granularity: blok}\n")
    (error,) = check_policy("fmt.yaml", ["formats.w8={scale: pow2}"]).errors
    assert (error.file, error.line, error.key_path) == ("fmt.yaml", 4, "formats.w8.granularity"), error
    errors = check_policy("jetrl_unified", ["rules.unified[1]={compute: fp32}", "formats.a8={axis: tokens}"]).errors
    assert errors and not any("rules.unified[1]" in e.file for e in errors), errors  # it set only `compute`


def test_a_flag_that_fails_halfway_changes_nothing():
    """`rules.foo.bar[0]` created `rules.foo: {}` before failing at `[0]`, and a second error blamed the file."""
    (error,) = check_policy("jetrl_unified", ["rules.foo.bar[0].compute=fp32"]).errors
    assert error.file == "--set rules.foo.bar[0].compute=fp32" and "cannot index rules.foo.bar" in error.message


def test_a_quoted_key_reaches_a_name_holding_dots(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dotted.yaml").write_text("version: 1\nname: d\nrules:\n  my.set:\n    - match: '*'\n"
                                          "phases: {train: my.set, rollout: my.set}\n")
    result = check_policy("dotted.yaml", ['rules."my.set"[0].compute=fp32'])
    assert not result.errors and result.policy.resolved["rules"]["my.set"][0]["compute"] == "fp32"
    assert parse_key_path('rules."my.set"[0].compute') == ("rules", "my.set", 0, "compute")
    for bad in ('rules."my.set', "rules..x", "rules.x.", 'rules."".x'):
        with pytest.raises(UsageError, match="quote a key holding dots"):
            parse_key_path(bad)


def test_an_unquoted_glob_gets_the_quoted_flag_as_its_hint():
    (error,) = check_policy("jetrl_unified", ["rules.unified[1].match=*_proj"]).errors
    assert "undefined alias" in error.message
    assert error.hint == """quote a glob: --set 'rules.unified[1].match="*_proj"'"""
    assert not check_policy("jetrl_unified", ['rules.unified[1].match="*_proj"']).errors
