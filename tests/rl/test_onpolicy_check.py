"""`rl.onpolicy.sampled_logprob_check` on tiny-llama: the engine's sampled logprobs vs the training phase's scores.

Bitwise (every sampled token's two logprobs have equal bits) for the policies that promise it, bf16_baseline,
jetrl_unified and jetrl_unified_kv (FP8 KV cache: the trainer rounds k/v with the rollout's scales); a visible
mismatch for fp8_rollout_naive; MoE refused with UnsupportedError before any weight is built. About 1 s per
policy on one free core (4 sequences x 8 tokens, scored in shuffled left-padded batches of 3).
"""

import pytest

from precision_engine.errors import UnsupportedError, UsageError
from precision_engine.pipeline import compile_for_model
from precision_engine.rl.onpolicy import PATH, sampled_logprob_check

SETTINGS = dict(n=4, max_new_tokens=8, seed=3, device="cpu", temperature=0.9, prompt_len=6, score_batch=3)


def _check(policy: str, model: str = "tiny-llama", **overrides) -> dict:
    return sampled_logprob_check(compile_for_model(policy, model), model, **{**SETTINGS, **overrides})


@pytest.mark.parametrize("policy", ["bf16_baseline", "jetrl_unified", "jetrl_unified_kv"])
def test_promised_policies_are_bitwise(policy):
    row = _check(policy)
    assert row["path"] == PATH and row["tokens"] == 4 * 8
    assert row["identity_promised"] and row["why_not_promised"] == ""
    assert row["bitwise"] and row["bitwise_fraction"] == 1.0
    assert row["max_abs_dlogp"] == 0.0 and row["mean_abs_dlogp"] == 0.0 and row["mean_kl"] == 0.0


def test_fp8_rollout_naive_shows_its_mismatch():
    row = _check("fp8_rollout_naive")
    assert not row["identity_promised"] and "plan differs" in row["why_not_promised"]
    assert not row["bitwise"] and row["bitwise_fraction"] < 0.5
    assert row["max_abs_dlogp"] > 1e-3 and row["mean_abs_dlogp"] > 0


def test_an_odd_sample_count_runs_ungrouped():
    row = _check("jetrl_unified", n=3, max_new_tokens=4, score_batch=2)
    assert row["tokens"] == 3 * 4 and row["bitwise"]


def test_moe_is_refused_clearly():
    with pytest.raises(UnsupportedError, match="built-in engine.*mixture of experts"):
        _check("bf16_baseline", "tiny-qwen3-moe")


def test_bad_sizes_are_usage_errors():
    with pytest.raises(UsageError, match="score_batch=0"):
        _check("bf16_baseline", score_batch=0)
