"""GRPO advantages, aggregation, KL estimators and the clipped loss against hand-computed cases, plus a float64
reference and micro-batch accumulation on fresh random inputs."""

from __future__ import annotations

import math

import pytest
import torch

from precision_engine.errors import UsageError
from precision_engine.policy.model import ImportanceSampling, ISLevel, ISMode
from precision_engine.rl.correction import compute_correction
from precision_engine.rl.losses import GRPOLossConfig, agg_loss, grpo_advantages, kl_penalty, policy_loss


def close(actual, expected, rtol=1e-5):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), rtol=rtol, atol=1e-6)


def test_grpo_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.7, 1.0, 1.0, 1.0, 0.25, 0.75])
    groups = torch.tensor([5, 5, 5, 5, 9, 2, 2, 2, 7, 7])
    adv = grpo_advantages(rewards, groups)
    std = math.sqrt(1 / 3)  # sample std of [1, 0, 1, 0]
    close(adv[:4], [0.5 / (std + 1e-6), -0.5 / (std + 1e-6)] * 2)
    close(adv[4], 0.7 / (1 + 1e-6))  # a group of one: mean 0, std 1, as verl has it
    assert torch.equal(adv[5:8], torch.zeros(3))  # all-equal rewards
    std2 = math.sqrt(2 * 0.25 ** 2)  # [0.25, 0.75]: mean 0.5, sample std sqrt(0.125)
    close(adv[8:], [-0.25 / (std2 + 1e-6), 0.25 / (std2 + 1e-6)])
    unscaled = grpo_advantages(rewards, groups, norm_adv_by_std=False)
    close(unscaled, [0.5, -0.5, 0.5, -0.5, 0.7, 0.0, 0.0, 0.0, -0.25, 0.25])
    assert torch.equal(grpo_advantages(rewards, groups, epsilon=0.5)[5:8], torch.zeros(3))


def test_grpo_advantages_shapes():
    with pytest.raises(ValueError, match="must both be"):
        grpo_advantages(torch.zeros(4, 1), torch.zeros(4, dtype=torch.long))


def test_agg_modes_by_hand():
    loss_mat = torch.tensor([[1.0, 2.0, 3.0], [4.0, 50.0, 60.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)  # the last row is empty
    close(agg_loss(loss_mat, mask, "token-mean"), 10 / 4)
    close(agg_loss(loss_mat, mask, "seq-mean-token-sum"), (6 + 4) / 2)
    close(agg_loss(loss_mat, mask, "seq-mean-token-mean"), (2 + 4) / 2)
    close(agg_loss(loss_mat, mask, "token-mean", num_tokens=8), 10 / 8)
    close(agg_loss(loss_mat, mask, "seq-mean-token-sum", num_sequences=5), 10 / 5)
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        assert agg_loss(loss_mat, torch.zeros_like(mask), mode).item() == 0.0  # not NaN
    with pytest.raises(UsageError, match="loss_agg_mode"):
        agg_loss(loss_mat, mask, "token-sum")


def test_kl_estimators_by_hand():
    logp = torch.tensor([-1.0, -2.0, -1.0, -40.0])
    ref = torch.tensor([-1.5, -1.0, -1.0, -5.0])  # ref - logp = -0.5, 1, 0, 35 (clamped to 20, then to 10)
    close(kl_penalty(logp, ref, "kl"), [0.5, -1.0, 0.0, -35.0])
    close(kl_penalty(logp, ref, "low_var_kl"), [math.exp(-0.5) - 0.5, math.e - 2, 0.0, 10.0])
    assert torch.equal(kl_penalty(logp, ref, "k3"), kl_penalty(logp, ref, "low_var_kl"))
    with pytest.raises(UsageError, match="kl_estimator"):
        kl_penalty(logp, ref, "mse")


# Four tokens of one sequence: (advantage, log ratio) = (1, 0.5) clipped at 1.2; (-1, ln 0.5) clipped at 0.8;
# (-1, ln 5) dual-clipped at c = 3; (2, 0) untouched. Per-token losses -1.2, 0.8, 3, -2.
ADV = torch.tensor([[1.0, -1.0, -1.0, 2.0]])
LOG_RATIO = torch.tensor([[0.5, math.log(0.5), math.log(5.0), 0.0]])
MASK = torch.ones(1, 4, dtype=torch.bool)


def test_clipped_loss_by_hand():
    old = torch.full((1, 4), -1.0)
    logp = (old + LOG_RATIO).requires_grad_()
    loss, m = policy_loss(logp, old, ADV, MASK)
    close(loss.detach(), (-1.2 + 0.8 + 3.0 - 2.0) / 4)
    assert m["actor/pg_loss"] == pytest.approx(0.15, rel=1e-5)
    assert m["actor/pg_clipfrac"] == pytest.approx(0.5)
    assert m["actor/pg_clipfrac_lower"] == pytest.approx(0.25)
    assert m["actor/ppo_kl"] == pytest.approx(-(0.5 + math.log(0.5) + math.log(5.0)) / 4, rel=1e-5)
    loss.backward()
    # only the untouched token has a gradient: d(-A r)/d logp = -A r = -2, over 4 tokens
    close(logp.grad, [[0.0, 0.0, 0.0, -0.5]])


def test_asymmetric_clip_by_hand():
    old = torch.full((1, 2), -1.0)
    logp = old + torch.tensor([[math.log(1.25), math.log(1.25)]])
    config = GRPOLossConfig(clip_ratio_low=0.2, clip_ratio_high=0.28)
    loss, m = policy_loss(logp, old, torch.tensor([[1.0, 1.0]]), torch.ones(1, 2, dtype=torch.bool), config)
    close(loss, -1.25)  # 1.25 < 1 + 0.28: not clipped
    assert m["actor/pg_clipfrac"] == 0.0


def test_is_weights_multiply_the_clipped_token_loss():
    old = torch.full((1, 4), -1.0)
    rollout = old - torch.tensor([[math.log(2.5), 0.0, math.log(0.5), 0.0]])  # r = 2.5, 1, 0.5, 1
    spec = ImportanceSampling(level=ISLevel.TOKEN, mode=ISMode.TRUNCATE, threshold=2.0)
    correction = compute_correction(spec, old, rollout, MASK)
    loss, _ = policy_loss(old + LOG_RATIO, old, ADV, MASK, correction=correction)
    close(loss, (-1.2 * 2 + 0.8 + 3.0 * 0.5 - 2.0) / 4)


def test_mask_mode_drops_tokens_from_the_denominator():
    old = torch.full((1, 4), -1.0)
    rollout = old - torch.tensor([[math.log(2.5), 0.0, math.log(0.4), 0.0]])  # 2.5 and 0.4 leave [0.5, 2]
    spec = ImportanceSampling(level=ISLevel.TOKEN, mode=ISMode.MASK, threshold=2.0)
    correction = compute_correction(spec, old, rollout, MASK)
    loss, m = policy_loss(old + LOG_RATIO, old, ADV, MASK, correction=correction)
    close(loss, (0.8 - 2.0) / 2)
    assert m["actor/pg_clipfrac"] == pytest.approx(0.5)  # of the two kept tokens, the 0.8 one is clipped


def test_kl_term_by_hand():
    old = torch.full((1, 4), -1.0)
    ref = old - 0.5  # ref - logp = -0.5 - log ratio
    config = GRPOLossConfig(kl_coef=0.1, kl_estimator="kl")
    loss, m = policy_loss(old + LOG_RATIO, old, ADV, MASK, config, ref_logprobs=ref)
    kl = float((LOG_RATIO + 0.5).mean())
    close(loss, 0.15 + 0.1 * kl)
    assert m["actor/kl_loss"] == pytest.approx(kl, rel=1e-5) and m["actor/kl_coef"] == 0.1
    with pytest.raises(UsageError, match="reference"):
        policy_loss(old + LOG_RATIO, old, ADV, MASK, config)


def test_per_sequence_advantages_broadcast():
    old = -torch.rand(3, 5, generator=torch.Generator().manual_seed(0))
    logp = old + 0.1
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([0.5, -1.0, 2.0])
    a, ma = policy_loss(logp, old, adv, mask)
    b, mb = policy_loss(logp, old, adv[:, None] * mask, mask)
    assert torch.equal(a, b) and ma == mb


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_against_float64_reference(mode):
    gen = torch.Generator().manual_seed(4)
    old = -torch.rand(8, 12, generator=gen, dtype=torch.float64) * 3
    logp = old + torch.randn(8, 12, generator=gen, dtype=torch.float64) * 0.3
    rollout = old + torch.randn(8, 12, generator=gen, dtype=torch.float64) * 0.3
    ref = old + torch.randn(8, 12, generator=gen, dtype=torch.float64) * 0.3
    mask = torch.arange(12)[None, :] < torch.randint(0, 13, (8,), generator=gen)[:, None]
    adv = torch.randn(8, generator=gen, dtype=torch.float64)
    spec = ImportanceSampling(level=ISLevel.TOKEN, mode=ISMode.TRUNCATE, threshold=1.5)
    config = GRPOLossConfig(loss_agg_mode=mode, kl_coef=0.01)

    def run(dtype):
        lp = logp.to(dtype).requires_grad_()
        corr = compute_correction(spec, old.to(dtype), rollout.to(dtype), mask)
        loss, _ = policy_loss(lp, old.to(dtype), adv.to(dtype), mask, config, correction=corr,
                              ref_logprobs=ref.to(dtype))
        loss.backward()
        return loss.detach().double(), lp.grad.double()

    (loss32, grad32), (loss64, grad64) = run(torch.float32), run(torch.float64)
    torch.testing.assert_close(loss32, loss64, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad32, grad64, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_micro_batches_sum_to_the_full_batch(mode):
    """Gradient accumulation: micro-batch losses normalised by the whole batch's counts add up to its loss."""
    gen = torch.Generator().manual_seed(6)
    old = -torch.rand(10, 7, generator=gen) * 3
    logp = old + torch.randn(10, 7, generator=gen) * 0.2
    mask = torch.arange(7)[None, :] < torch.randint(0, 8, (10,), generator=gen)[:, None]
    adv = torch.randn(10, generator=gen)
    config = GRPOLossConfig(loss_agg_mode=mode)
    full, _ = policy_loss(logp, old, adv, mask, config)
    counts = {"num_tokens": mask.sum(), "num_sequences": (mask.sum(-1) > 0).sum()}
    parts = [policy_loss(logp[rows], old[rows], adv[rows], mask[rows], config, **counts)[0]
             for rows in (slice(0, 3), slice(3, 4), slice(4, 10))]
    torch.testing.assert_close(sum(parts), full, rtol=1e-6, atol=1e-7)


def test_gradient_does_not_flow_through_the_correction():
    gen = torch.Generator().manual_seed(8)
    old = (-torch.rand(4, 6, generator=gen)).requires_grad_()
    rollout = old.detach() + torch.randn(4, 6, generator=gen) * 0.5
    mask = torch.ones(4, 6, dtype=torch.bool)
    spec = ImportanceSampling(level=ISLevel.SEQUENCE, mode=ISMode.TRUNCATE, threshold=2.0)
    correction = compute_correction(spec, old, rollout, mask)
    logp = (old.detach() + 0.05).requires_grad_()
    loss, _ = policy_loss(logp, old.detach(), torch.randn(4, generator=gen), mask, correction=correction)
    loss.backward()
    assert old.grad is None and logp.grad is not None


def test_empty_response_gives_zero_loss():
    old = torch.full((2, 3), -1.0)
    loss, m = policy_loss((old + 0.3).requires_grad_(), old, torch.tensor([1.0, -1.0]),
                          torch.zeros(2, 3, dtype=torch.bool))
    assert loss.item() == 0.0 and m["actor/pg_clipfrac"] == 0.0


@pytest.mark.parametrize("kwargs, message", [
    ({"loss_agg_mode": "token-sum"}, "loss_agg_mode"),
    ({"kl_estimator": "mse"}, "kl_estimator"),
    ({"clip_ratio_c": 1.0}, "clip_ratio_c"),
    ({"clip_ratio_low": -0.1}, "clip ratios"),
])
def test_config_is_validated(kwargs, message):
    with pytest.raises(UsageError, match=message):
        GRPOLossConfig(**kwargs)


def test_integer_rewards_and_a_negative_kl_coef():
    """0/1 rewards as ints or bools raised torch's "could not infer output dtype"; a negative kl_coef passed the
    config and failed mid-step (the trainer builds no reference model for it)."""
    groups = torch.tensor([0, 0, 1, 1])
    floats = grpo_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), groups)
    assert torch.equal(grpo_advantages(torch.tensor([1, 0, 1, 1]), groups), floats)
    assert torch.equal(grpo_advantages(torch.tensor([True, False, True, True]), groups), floats)
    with pytest.raises(UsageError, match="kl_coef must be >= 0, got -0.1"):
        GRPOLossConfig(kl_coef=-0.1)
