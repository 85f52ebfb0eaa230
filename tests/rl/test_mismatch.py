"""Mismatch metrics on constructed logprobs, every number computed by hand here."""

from __future__ import annotations

import math

import pytest
import torch

from precision_engine.policy.model import ImportanceSampling, ISLevel, ISMode
from precision_engine.rl.correction import compute_correction
from precision_engine.rl.mismatch import mismatch_metrics

# Row 0 has one padded slot holding garbage (NaN in train, 9 in rollout) that must not leak into any metric.
TRAIN = torch.tensor([[-1.0, -2.0, float("nan")], [-0.1, -0.3, -0.2]])
ROLLOUT = torch.tensor([[-1.0, -1.5, 9.0], [-0.1, -0.2, -0.4]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)


def approx(value):
    return pytest.approx(value, rel=1e-5, abs=1e-6)


def test_offpolicy_metrics_by_hand():
    m = mismatch_metrics(TRAIN, ROLLOUT, MASK)
    d = [0.0, -0.5, 0.0, -0.1, 0.2]  # train - rollout on the five response tokens
    assert m["mismatch/max_abs_dlogp"] == approx(0.5)
    assert m["mismatch/mean_abs_dlogp"] == approx(0.8 / 5)
    assert m["mismatch/bitwise_equal_fraction"] == approx(2 / 5)
    assert m["rollout_corr/kl"] == approx(-sum(d) / 5)
    assert m["rollout_corr/k3_kl"] == approx(sum(math.exp(x) - x - 1 for x in d) / 5)
    train_means, rollout_means = [-1.5, -0.2], [-1.25, -0.7 / 3]
    assert m["rollout_corr/training_ppl"] == approx((math.exp(1.5) + math.exp(0.2)) / 2)
    assert m["rollout_corr/rollout_log_ppl"] == approx(-sum(rollout_means) / 2)
    diffs = [r - t for r, t in zip(rollout_means, train_means)]  # 0.25, -1/30
    assert m["rollout_corr/log_ppl_diff"] == approx(sum(diffs) / 2)
    assert m["rollout_corr/log_ppl_abs_diff"] == approx((0.25 + 1 / 30) / 2)
    assert m["rollout_corr/log_ppl_diff_max"] == approx(0.25)
    assert m["rollout_corr/ppl_ratio"] == approx((math.exp(0.25) + math.exp(-1 / 30)) / 2)
    assert m["rollout_corr/chi2_token"] == approx(sum(math.exp(2 * x) for x in d) / 5 - 1)
    assert m["rollout_corr/chi2_seq"] == approx((math.exp(2 * -0.5) + math.exp(2 * 0.1)) / 2 - 1)
    assert all(math.isfinite(v) for v in m.values())


def test_identical_logprobs():
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(8, 16, generator=gen) * 3
    mask = torch.arange(16)[None, :] < torch.randint(1, 17, (8,), generator=gen)[:, None]
    m = mismatch_metrics(logp, logp.clone(), mask)
    assert m["mismatch/max_abs_dlogp"] == 0.0 and m["mismatch/mean_abs_dlogp"] == 0.0
    assert m["mismatch/bitwise_equal_fraction"] == pytest.approx(1.0, abs=1e-7)  # mask.sum() / (mask.sum() + 1e-8)
    assert m["rollout_corr/kl"] == 0.0 and m["rollout_corr/k3_kl"] == 0.0 and m["rollout_corr/log_ppl_abs_diff"] == 0.0


def test_bitwise_means_bits():
    """-0.0 and 0.0 compare equal but are different bits; an ulp apart is not equal either."""
    train = torch.tensor([[0.0, -1.0, -2.0, -3.0]])
    rollout = torch.tensor([[-0.0, torch.nextafter(torch.tensor(-1.0), torch.tensor(0.0)).item(), -2.0, -3.0]])
    m = mismatch_metrics(train, rollout, torch.ones(1, 4, dtype=torch.bool))
    assert m["mismatch/bitwise_equal_fraction"] == approx(0.5)


def test_empty_batch_has_nothing_to_measure():
    assert mismatch_metrics(TRAIN, ROLLOUT, torch.zeros_like(MASK)) == {}


def test_empty_rows_count_as_verl_counts_them():
    """A row without response tokens has mean logprob 0 (ppl 1) in the per-sequence means, as in verl."""
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    m = mismatch_metrics(TRAIN, ROLLOUT, mask)
    assert m["rollout_corr/training_ppl"] == approx((math.exp(1.5) + 1.0) / 2)
    assert m["mismatch/mean_abs_dlogp"] == approx(0.25)


def test_truncation_metrics_by_hand():
    spec = ImportanceSampling(level=ISLevel.TOKEN, mode=ISMode.TRUNCATE, threshold=2.0)
    rollout = torch.full((1, 5), -2.0)
    train = rollout + torch.tensor([[math.log(2.5), math.log(0.4), 0.0, math.log(3.0), 5.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]], dtype=torch.bool)
    m = mismatch_metrics(train, rollout, mask, compute_correction(spec, train, rollout, mask))
    weights = [2.0, 0.4, 1.0, 2.0]
    assert m["rollout_corr/rollout_is_mean"] == approx(sum(weights) / 4)
    assert m["rollout_corr/rollout_is_max"] == approx(2.0) and m["rollout_corr/rollout_is_min"] == approx(0.4)
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == approx(0.5)  # 2.5 and 3 exceed C
    assert m["rollout_corr/rollout_is_ratio_fraction_low"] == approx(0.25)  # 0.4 < 1/C
    assert m["mismatch/corrected_fraction"] == approx(0.5)
    mean = sum(weights) / 4
    assert m["rollout_corr/rollout_is_std"] == approx(math.sqrt(sum(w * w for w in weights) / 4 - mean * mean))
    assert m["rollout_corr/rollout_is_eff_sample_size"] == approx(1 / (sum((w / mean) ** 2 for w in weights) / 4))
    assert "rollout_corr/rollout_rs_masked_fraction" not in m


def test_masking_metrics_by_hand():
    spec = ImportanceSampling(level=ISLevel.SEQUENCE, mode=ISMode.MASK, threshold=2.0)
    rollout = torch.full((3, 2), -1.0)
    train = rollout + torch.tensor([[0.2, 0.1], [1.0, 0.5], [-0.1, 0.0]])  # R = e^0.3, e^1.5 (out), e^-0.1
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]], dtype=torch.bool)
    m = mismatch_metrics(train, rollout, mask, compute_correction(spec, train, rollout, mask))
    assert m["rollout_corr/rollout_rs_masked_fraction"] == approx(2 / 5)
    assert m["rollout_corr/rollout_rs_seq_masked_fraction"] == approx(1 / 3)
    assert m["mismatch/corrected_fraction"] == approx(2 / 5)
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == approx(1 / 3)  # sequences with R > 2
    assert m["rollout_corr/rollout_is_max"] == approx(math.exp(1.5))  # from the unclamped log sum
    assert m["rollout_corr/rollout_is_mean"] == approx((2 * math.exp(0.3) + 2 * 2.0 + math.exp(-0.1)) / 5)


def test_metrics_are_floats_and_log_ratios_beyond_20_stay_finite():
    gen = torch.Generator().manual_seed(3)
    train = -torch.rand(6, 10, generator=gen) * 4
    rollout = train + torch.randn(6, 10, generator=gen)
    rollout[0, 0] = train[0, 0] - 30.0
    mask = torch.ones(6, 10, dtype=torch.bool)
    for level in ISLevel:
        spec = ImportanceSampling(level=level, mode=ISMode.TRUNCATE, threshold=2.0)
        m = mismatch_metrics(train, rollout, mask, compute_correction(spec, train, rollout, mask))
        assert all(type(v) is float for v in m.values())
        assert math.isfinite(m["rollout_corr/chi2_token"]) and math.isfinite(m["rollout_corr/chi2_seq"])
        assert m["rollout_corr/rollout_is_max"] <= 2.0 or level is ISLevel.SEQUENCE
