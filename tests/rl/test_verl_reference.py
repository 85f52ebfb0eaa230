"""Our correction, mismatch metrics and GRPO loss against verl 0.9.1's own functions on the same random tensors.

Skipped unless `import verl` works (CI installs verl into its own venv). Every comparison is exact: torch.equal
on tensors and == on metric floats, because each formula runs the same torch ops in the same order as verl's.
The correction is driven through `verl_rollout_correction`, so these tests check the mapping too. Takes ~3 s.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")
from omegaconf import OmegaConf  # noqa: E402  (verl depends on it)
from verl.trainer.ppo import core_algos, rollout_corr_helper  # noqa: E402

from precision_engine.policy.model import ImportanceSampling, ISLevel, ISMode  # noqa: E402
from precision_engine.rl.correction import compute_correction, verl_rollout_correction  # noqa: E402
from precision_engine.rl.losses import GRPOLossConfig, agg_loss, grpo_advantages, kl_penalty, policy_loss  # noqa: E402
from precision_engine.rl.mismatch import mismatch_metrics  # noqa: E402

PREFIX = "algorithm.rollout_correction."

SPECS = [
    ImportanceSampling(level=level, mode=ISMode.TRUNCATE, threshold=threshold)
    for level in ISLevel for threshold in (2.0, 1.5, 5.0)
] + [
    ImportanceSampling(level=level, mode=ISMode.MASK, threshold=threshold, lower_threshold=lower)
    for level in ISLevel for threshold, lower in ((2.0, None), (2.0, 0.5), (3.0, 0.3), (1.2, 0.9))
]


def spec_id(spec: ImportanceSampling) -> str:
    return f"{spec.level.value}-{spec.mode.value}-{spec.threshold}-{spec.lower_threshold}"


def batch(seed: int, *, scale: float, mask_dtype=torch.bool, batch_size: int = 12, length: int = 9):
    """Fresh logprobs with padding, one empty row and a few log ratios beyond +-20."""
    gen = torch.Generator().manual_seed(seed)
    train = -torch.rand(batch_size, length, generator=gen) * 4 - 1e-3
    rollout = train + torch.randn(batch_size, length, generator=gen) * scale
    rollout[0, 1], rollout[2, 0] = train[0, 1] + 25.0, train[2, 0] - 30.0
    lengths = torch.randint(1, length + 1, (batch_size,), generator=gen)
    lengths[3] = 0
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(mask_dtype)
    return train, rollout, mask


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
@pytest.mark.parametrize("scale", [0.05, 0.6])
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32])
def test_correction_and_metrics_equal_verl(spec, scale, mask_dtype):
    train, rollout, mask = batch(7, scale=scale, mask_dtype=mask_dtype)
    keys = {key.removeprefix(PREFIX): value for key, value in verl_rollout_correction(spec).items()}
    settings = {key: keys[key] for key in ("rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize",
                                           "rollout_rs", "rollout_rs_threshold")}
    proto, verl_mask, verl_metrics = rollout_corr_helper.compute_rollout_correction_and_rejection_mask(
        old_log_prob=train, rollout_log_prob=rollout, response_mask=mask, **settings)
    ours = compute_correction(spec, train, rollout, mask)
    assert torch.equal(ours.weights, proto.batch["rollout_is_weights"])
    assert ours.mask.dtype == verl_mask.dtype and torch.equal(ours.mask, verl_mask)
    metrics = mismatch_metrics(train, rollout, mask, ours)
    shared = {key: value for key, value in metrics.items() if key.startswith("rollout_corr/")}
    assert len(shared) >= 20
    assert shared == {key: verl_metrics[key] for key in shared}


def test_metrics_without_correction_equal_verl():
    train, rollout, mask = batch(3, scale=0.3)
    expected = rollout_corr_helper.compute_rollout_corr_metrics_from_logprobs(train, rollout, mask)
    metrics = mismatch_metrics(train, rollout, mask)
    assert {key: value for key, value in metrics.items() if key.startswith("rollout_corr/")} == expected


def test_no_correction_maps_to_metrics_only():
    keys = verl_rollout_correction(None)
    assert keys[PREFIX + "rollout_is"] is None and keys[PREFIX + "rollout_rs"] is None


@pytest.mark.parametrize("norm_adv_by_std", [True, False])
def test_grpo_advantages_equal_verl(norm_adv_by_std):
    gen = torch.Generator().manual_seed(11)
    _, _, mask = batch(11, scale=0.1, mask_dtype=torch.float32, batch_size=14)
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 3, 3, 4, 4, 4])  # group 2 has one sample
    rewards = torch.rand(14, generator=gen)
    rewards[11:] = 1.0  # group 4: all equal
    token_rewards = torch.zeros_like(mask)
    last = (mask.sum(-1).long() - 1).clamp(min=0)
    token_rewards[torch.arange(14), last] = rewards
    expected, _ = core_algos.compute_grpo_outcome_advantage(
        token_rewards, mask, np.array([f"uid{int(g)}" for g in groups]), norm_adv_by_std_in_grpo=norm_adv_by_std)
    ours = grpo_advantages(token_rewards.sum(-1), groups, norm_adv_by_std=norm_adv_by_std)
    assert torch.equal(ours.unsqueeze(-1) * mask, expected)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
@pytest.mark.parametrize("estimator", ["kl", "low_var_kl"])
@pytest.mark.parametrize("spec", [None, SPECS[0], SPECS[-1]], ids=["none", "token-tis", "seq-mis"])
def test_policy_loss_equals_verl(mode, estimator, spec):
    """The whole loss as verl's actor builds it: vanilla pg loss with IS weights on the rejection mask, plus KL."""
    old, rollout, mask = batch(5, scale=0.2)
    gen = torch.Generator().manual_seed(5)
    new = old + torch.randn(old.shape, generator=gen) * 0.3
    ref = old + torch.randn(old.shape, generator=gen) * 0.5
    ref[1, 0] = old[1, 0] + 40.0  # beyond verl's clamps of the k3 estimator
    advantages = torch.randn(old.shape[0], generator=gen)
    config = GRPOLossConfig(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, loss_agg_mode=mode,
                            kl_coef=0.05, kl_estimator=estimator)
    correction = compute_correction(spec, old, rollout, mask)
    verl_mask = correction.mask
    verl_advantages = advantages.unsqueeze(-1) * verl_mask  # verl broadcasts onto the (rejection-)masked tokens

    theirs_logp = new.clone().requires_grad_()
    actor = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28,
                              "clip_ratio_c": 3.0, "global_batch_info": {}})
    pg_loss, pg_metrics = core_algos.compute_policy_loss_vanilla(
        old_log_prob=old, log_prob=theirs_logp, advantages=verl_advantages, response_mask=verl_mask.bool(),
        loss_agg_mode=mode, config=actor, rollout_is_weights=correction.weights)
    kl = core_algos.agg_loss(core_algos.kl_penalty(theirs_logp, ref, estimator), verl_mask.bool(), mode)
    (pg_loss + kl * 0.05).backward()

    ours_logp = new.clone().requires_grad_()
    loss, metrics = policy_loss(ours_logp, old, advantages, mask, config, correction=correction, ref_logprobs=ref)
    loss.backward()
    assert torch.equal(loss.detach(), (pg_loss + kl * 0.05).detach())
    assert torch.equal(ours_logp.grad, theirs_logp.grad)
    assert {key: metrics[key] for key in pg_metrics} == pg_metrics
    assert metrics["actor/pg_loss"] == pg_loss.item() and metrics["actor/kl_loss"] == kl.item()


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_agg_loss_with_global_counts_equals_verl(mode):
    """Micro-batch normalisation by the whole batch's counts, as verl's batch_num_tokens / global_batch_size."""
    _, loss_mat, mask = batch(9, scale=1.0)
    expected = core_algos.agg_loss(loss_mat, mask, mode, batch_num_tokens=200, global_batch_size=30)
    assert torch.equal(agg_loss(loss_mat, mask, mode, num_tokens=200, num_sequences=30), expected)


@pytest.mark.parametrize("estimator", ["kl", "low_var_kl", "k1", "k3"])
def test_kl_penalty_equals_verl(estimator):
    logp, ref, _ = batch(13, scale=15.0)
    assert torch.equal(kl_penalty(logp, ref, estimator), core_algos.kl_penalty(logp, ref, estimator))
