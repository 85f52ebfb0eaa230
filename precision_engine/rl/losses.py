"""GRPO's advantages and clipped policy loss, formula for formula as verl 0.9.1 computes them.

- Advantages (`compute_grpo_outcome_advantage`): each sequence's reward minus its group's mean, divided by the
  group's sample standard deviation (Bessel-corrected, `torch.std`) plus epsilon 1e-6, or not divided
  (`norm_adv_by_std=False`, Dr. GRPO). A group of one sample gets mean 0 and std 1: its advantage is its
  reward / (1 + epsilon), not 0. A group whose rewards are all equal gets 0 when the mean is exact (0/1 rewards);
  otherwise the mean's rounding error over std + epsilon (verl's value too: 0.056 for eight rewards of 0.7).
- Policy loss (`compute_policy_loss_vanilla`): ratio = exp(clamp(logp - old_logp, +-20)); per token
  max(-A r, -A clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high)), and for A < 0 also capped at -A c (dual clip,
  c = `clip_ratio_c` > 1). Then the IS weights multiply this per-token loss, and the correction's mask (the
  response mask minus rejected tokens) is the one every term aggregates over: this is where verl applies
  `rollout_is_weights` and its rejection-modified response mask.
- Aggregation (`agg_loss`): `token-mean` (verl's default: the sum over all response tokens / their count),
  `seq-mean-token-sum` (each sequence's token sum, averaged over non-empty sequences), `seq-mean-token-mean`
  (each sequence's token mean, averaged over non-empty sequences). Micro-batches that accumulate gradients pass
  the whole batch's `num_tokens` / `num_sequences` (verl's batch_num_tokens / global_batch_size), so the
  summed micro-batch losses equal the full batch's loss.
- KL to a reference (verl's `use_kl_loss`): `kl` (k1: logp - ref_logp) or `low_var_kl` (k3: exp(d) - d - 1
  with d = ref_logp - logp clamped to +-20, the result clamped to [-10, 10]), aggregated like the pg loss and
  added times `kl_coef`.

One departure from verl: where the aggregation has nothing to count (no response token left), the loss is 0
rather than verl's 0/0 = NaN, so a fully masked micro-batch adds nothing instead of poisoning the step.
Metric names are verl's as logged by its trainer (`actor/pg_loss`, `actor/pg_clipfrac`, `actor/ppo_kl`,
`actor/pg_clipfrac_lower`, `actor/kl_loss`, `actor/kl_coef`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from precision_engine.errors import UsageError
from precision_engine.rl.correction import LOG_RATIO_BOUND, Correction
from precision_engine.rl.masked import masked_mean, masked_sum

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
KL_ESTIMATORS = ("kl", "low_var_kl")  # verl's names for k1 and k3 (it also accepts "k1" and "k3")


@dataclass(frozen=True)
class GRPOLossConfig:
    """The clipped-loss knobs, with verl's actor defaults; `kl_coef` 0 leaves the reference KL out."""

    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = "token-mean"
    kl_coef: float = 0.0
    kl_estimator: str = "low_var_kl"

    def __post_init__(self) -> None:
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise UsageError(f"unknown loss_agg_mode {self.loss_agg_mode!r}; one of {', '.join(LOSS_AGG_MODES)}")
        if _kl_name(self.kl_estimator) not in KL_ESTIMATORS:
            raise UsageError(f"unknown kl_estimator {self.kl_estimator!r}; one of {', '.join(KL_ESTIMATORS)}")
        if not self.clip_ratio_c > 1.0:
            raise UsageError(f"clip_ratio_c (dual-clip bound) must be > 1, got {self.clip_ratio_c}")
        if not self.kl_coef >= 0:  # a negative one would reward drifting from the reference (and NaN passes `<`)
            raise UsageError(f"kl_coef must be >= 0, got {self.kl_coef}")
        if self.clip_ratio_low < 0 or self.clip_ratio_high < 0:
            raise UsageError(f"clip ratios must be >= 0, got low {self.clip_ratio_low}, high {self.clip_ratio_high}")


def grpo_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, epsilon: float = 1e-6, norm_adv_by_std: bool = True
) -> torch.Tensor:
    """One advantage per sequence (B,) from its scalar reward (B,) and the id of its prompt's group (B,)."""
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(f"rewards and group_ids must both be (B,), got {tuple(rewards.shape)} and "
                         f"{tuple(group_ids.shape)}")
    if not rewards.is_floating_point():  # 0/1 rewards as ints or bools: a mean needs a float
        rewards = rewards.to(torch.get_default_dtype())
    with torch.no_grad():
        advantages = torch.empty_like(rewards)
        for group in torch.unique(group_ids):
            members = (group_ids == group).nonzero(as_tuple=True)[0]
            scores = rewards[members]
            if scores.numel() == 1:
                mean = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
                std = torch.ones((), dtype=rewards.dtype, device=rewards.device)
            else:
                mean, std = scores.mean(), scores.std()
            advantages[members] = (scores - mean) / (std + epsilon) if norm_adv_by_std else scores - mean
    return advantages


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    *,
    num_tokens: int | torch.Tensor | None = None,
    num_sequences: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """A (B, T) per-token loss reduced to a scalar over `loss_mask` (modes in the module docstring)."""
    if loss_agg_mode == "token-mean":
        count = loss_mask.sum() if num_tokens is None else num_tokens
        return masked_sum(loss_mat, loss_mask) / _at_least_one(count)
    token_counts = loss_mask.sum(dim=-1)
    if loss_agg_mode == "seq-mean-token-sum":
        seq_losses = (loss_mat * loss_mask).sum(dim=-1)
    elif loss_agg_mode == "seq-mean-token-mean":
        seq_losses = (loss_mat * loss_mask).sum(dim=-1) / (token_counts + 1e-8)
    else:
        raise UsageError(f"unknown loss_agg_mode {loss_agg_mode!r}; one of {', '.join(LOSS_AGG_MODES)}")
    seq_mask = (token_counts > 0).float()  # a sequence with no token left does not count
    count = seq_mask.sum() if num_sequences is None else num_sequences
    return masked_sum(seq_losses, seq_mask) / _at_least_one(count)


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "low_var_kl") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from the sampled tokens' logprobs: k1 (`kl`) or k3 (`low_var_kl`)."""
    name = _kl_name(estimator)
    if name == "kl":
        return logprobs - ref_logprobs
    if name == "low_var_kl":
        log_ratio = (ref_logprobs - logprobs).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
        return (torch.exp(log_ratio) - log_ratio - 1).clamp(-10, 10)
    raise UsageError(f"unknown kl_estimator {estimator!r}; one of {', '.join(KL_ESTIMATORS)}")


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    config: GRPOLossConfig | None = None,
    *,
    correction: Correction | None = None,
    ref_logprobs: torch.Tensor | None = None,
    num_tokens: int | torch.Tensor | None = None,
    num_sequences: int | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO loss to minimise and its metrics.

    `logprobs` (B, T) carry the gradient; `old_logprobs` are the trainer's logprobs before the update (the
    correction's train_logprobs); `advantages` are (B,) per sequence or (B, T); `ref_logprobs` are needed when
    `config.kl_coef` is set (`config` defaults to GRPOLossConfig()). With a `correction`, its mask replaces
    `response_mask` everywhere.
    """
    config = GRPOLossConfig() if config is None else config
    mask = response_mask if correction is None else correction.mask
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1).expand_as(logprobs)
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    losses_unclipped = -advantages * ratio
    losses_clipped = -advantages * torch.clamp(ratio, 1 - config.clip_ratio_low, 1 + config.clip_ratio_high)
    losses = torch.maximum(losses_unclipped, losses_clipped)
    losses_dual = -advantages * config.clip_ratio_c
    negative = advantages < 0
    pg_losses = torch.where(negative, torch.min(losses_dual, losses), losses)
    if correction is not None and correction.weights is not None:  # zero where rejected: 0 * a NaN weight is NaN
        pg_losses = pg_losses * torch.where(mask > 0, correction.weights, 0.0)
    counts = {"num_tokens": num_tokens, "num_sequences": num_sequences}
    pg_loss = agg_loss(pg_losses, mask, config.loss_agg_mode, **counts)
    with torch.no_grad():
        metrics = {
            "actor/pg_loss": pg_loss.detach(),
            "actor/pg_clipfrac": masked_mean(torch.gt(losses_clipped, losses_unclipped).float(), mask),
            "actor/ppo_kl": masked_mean(-log_ratio, mask),
            "actor/pg_clipfrac_lower": masked_mean(torch.gt(losses, losses_dual) * negative.float(), mask),
        }
    loss = pg_loss
    if config.kl_coef:
        if ref_logprobs is None:
            raise UsageError("a KL penalty (kl_coef > 0) needs the reference model's logprobs")
        kl_loss = agg_loss(kl_penalty(logprobs, ref_logprobs, config.kl_estimator), mask, config.loss_agg_mode,
                           **counts)
        loss = pg_loss + kl_loss * config.kl_coef
        metrics["actor/kl_loss"] = kl_loss.detach()
    keys = list(metrics)
    values = dict(zip(keys, torch.stack([metrics[key].to(torch.float64) for key in keys]).tolist()))
    if config.kl_coef:
        values["actor/kl_coef"] = float(config.kl_coef)
    return loss, values


def _at_least_one(count: int | torch.Tensor) -> int | torch.Tensor:
    """The denominator, or 1 where it is 0: the numerator is then 0 too, and 0 beats verl's NaN."""
    return count.clamp(min=1) if isinstance(count, torch.Tensor) else max(count, 1)


def _kl_name(estimator: str) -> str:
    return {"k1": "kl", "k3": "low_var_kl"}.get(estimator, estimator)
