"""Every shipped policy validates cleanly (no warnings either), documents itself, and says what the papers say."""

from __future__ import annotations

from dataclasses import replace

import pytest

from precision_engine.numerics.formats import Axis, DType, Granularity
from precision_engine.policy import check_policy, load_policy, shipped_path, shipped_policies
from precision_engine.policy.model import Calibrate, ISMode
from precision_engine.policy.yaml_source import parse_yaml
from precision_engine.policy.schema import check_structure

EXPECTED = {"bf16_baseline", "fp8_rollout_naive", "fp8rl_rollout_tis", "fp8rl_rollout_mis", "jetrl_unified",
            "jetrl_unified_kv", "jetrl_unified_wgrad_blocks"}


def test_all_expected_policies_ship():
    assert EXPECTED <= set(shipped_policies())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_policy_is_clean(name):
    result = check_policy(name)
    assert result.diagnostics == (), "\n".join(map(str, result.diagnostics))
    assert result.policy.name == name
    assert result.policy.description


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_policy_header_references_schema_and_paper(name):
    text = shipped_path(name).read_text()
    assert text.splitlines()[0] == "# yaml-language-server: $schema=../policy/schema.json"
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert "Reproduces:" in header


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_file_alone_passes_the_schema_as_an_editor_sees_it(name):
    data, source_map, problems = parse_yaml(shipped_path(name).read_text(), name)
    assert problems == []
    assert check_structure(data, source_map) == []


def test_jetrl_unified_quantizes_all_three_gemms_identically_in_both_phases():
    policy = load_policy("jetrl_unified")
    assert policy.phases["train"] == policy.phases["rollout"]
    linear = next(r.linear for r in policy.rules_for("train") if r.linear)
    assert (linear.weight.granularity, linear.weight.block) == (Granularity.BLOCK, (128, 128))
    assert (linear.input.granularity, linear.input.group, linear.input.axis) == (Granularity.GROUP, 128, Axis.K)
    assert linear.grad_output == linear.input
    assert (linear.wgrad_operands.group, linear.wgrad_operands.axis) == (128, Axis.TOKENS)
    assert policy.master_weights is DType.BF16
    assert policy.correction.importance_sampling is None


def test_wgrad_blocks_changes_only_x_in_the_wgrad():
    """jetrl_unified_wgrad_blocks is jetrl_unified but for x^T's wgrad format: 128x128 blocks, dy^T's unchanged."""
    unified, blocks = load_policy("jetrl_unified"), load_policy("jetrl_unified_wgrad_blocks")
    linear = next(r.linear for r in blocks.rules_for("train") if r.linear)
    base = next(r.linear for r in unified.rules_for("train") if r.linear)
    assert (linear.wgrad_input.granularity, linear.wgrad_input.block) == (Granularity.BLOCK, (128, 128))
    assert linear.wgrad_input.dtype is DType.FLOAT8_E4M3 and base.wgrad_input is None
    assert replace(linear, wgrad_input=None) == base
    assert blocks.phases == unified.phases and blocks.rules_for("rollout") == blocks.rules_for("train")
    assert (blocks.kv_cache, blocks.correction, blocks.master_weights) == \
        (unified.kv_cache, unified.correction, unified.master_weights)


def test_fp8rl_tis_is_bf16_training_with_fp8_rollout_kv_and_token_tis():
    policy = load_policy("fp8rl_rollout_tis")
    assert all(r.linear is None for r in policy.rules_for("train"))
    rollout = policy.rules_for("rollout")
    assert rollout[0].compute is DType.BF16 and "lm_head" in rollout[0].match
    assert rollout[1].linear.forward_is_fp8 and rollout[1].linear.grad_output is None
    assert policy.kv_cache.dtype is DType.FLOAT8_E4M3
    assert policy.kv_cache.calibrate is Calibrate.EVERY_WEIGHT_UPDATE
    tis = policy.correction.importance_sampling
    assert (tis.level.value, tis.mode, tis.threshold) == ("token", ISMode.TRUNCATE, 2.0)


def test_mis_changes_only_the_correction_mode():
    tis, mis = load_policy("fp8rl_rollout_tis"), load_policy("fp8rl_rollout_mis")
    assert mis.correction.importance_sampling.mode is ISMode.MASK
    assert mis.correction.importance_sampling.lower_threshold == 0.5
    assert (mis.rule_sets, mis.kv_cache, mis.phases) == (tis.rule_sets, tis.kv_cache, tis.phases)


def test_naive_rollout_has_no_correction_and_bf16_kv():
    policy = load_policy("fp8_rollout_naive")
    assert policy.correction.importance_sampling is None
    assert not policy.kv_cache.is_fp8
    assert policy.phases == {"train": "bf16", "rollout": "fp8_rollout"}


def test_jetrl_unified_kv_adds_only_the_kv_cache():
    base, kv = load_policy("jetrl_unified"), load_policy("jetrl_unified_kv")
    assert kv.kv_cache.is_fp8 and not base.kv_cache.is_fp8
    assert kv.rule_sets == base.rule_sets
