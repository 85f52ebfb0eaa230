"""Per-step mismatch between the rollout engine's logprobs and the trainer's, on response tokens.

Keys under `rollout_corr/` carry verl 0.9.1's names and formulas (`rollout_corr_helper.compute_offpolicy_metrics`
and `compute_is_metrics`, and the overall fractions of `compute_rollout_rejection_mask`), so a builtin run and a
verl run of the same policy log comparable numbers. With log r = train - rollout per token:

- `kl`: mean of (rollout - train), the k1 estimate of KL(pi_rollout || pi_train); `k3_kl`: mean of
  r - log r - 1 (unclamped, as verl has it).
- `training_ppl`, `rollout_ppl`: batch mean of each sequence's exp(-mean logprob); `training_log_ppl`,
  `rollout_log_ppl` the mean of -mean logprob; `log_ppl_diff` (rollout mean logprob - train mean logprob per
  sequence) as mean, |.| mean (`log_ppl_abs_diff`), max and min; `ppl_ratio`: mean of exp(log_ppl_diff).
- `chi2_token`: mean of r^2 - 1, `chi2_seq`: batch mean of (prod r)^2 - 1, logs clamped to +-20 first.
- With a correction: `rollout_is_mean` / `_max` / `_min` / `_std` / `_eff_sample_size` /
  `_ratio_fraction_high` / `_ratio_fraction_low` of the weights against the threshold C and 1/C, and in mask
  mode `rollout_rs_masked_fraction` (response tokens dropped) and `rollout_rs_seq_masked_fraction` (sequences
  that lost any token).

As in verl, per-sequence means count a sequence with no response token as mean logprob 0. Our own keys, under
`mismatch/`: `max_abs_dlogp` and `mean_abs_dlogp` (|train - rollout|), `bitwise_equal_fraction` (tokens whose
two logprobs have identical bits, so -0.0 differs from 0.0: the batch-invariant promise is about bits), and
`corrected_fraction` (response tokens whose weight was truncated, or that the mask dropped). A batch with no
response token at all has nothing to measure and gives an empty dict.
"""

from __future__ import annotations

import torch

from precision_engine.policy.model import ISLevel, ISMode
from precision_engine.rl.correction import LOG_RATIO_BOUND, Correction
from precision_engine.rl.masked import masked_mean, masked_sum

_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def mismatch_metrics(
    train_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    correction: Correction | None = None,
) -> dict[str, float]:
    """All mismatch metrics of one step as Python floats; `correction` adds what it truncated or masked."""
    if not bool(response_mask.any()):
        return {}
    with torch.no_grad():
        train, rollout = train_logprobs.detach(), rollout_logprobs.detach()
        metrics = {f"rollout_corr/{key}": value for key, value in _offpolicy(train, rollout, response_mask).items()}
        dlogp = (train - rollout).abs()
        keep = response_mask.bool()
        metrics["mismatch/max_abs_dlogp"] = dlogp.masked_fill(~keep, 0.0).max()
        metrics["mismatch/mean_abs_dlogp"] = masked_mean(dlogp, response_mask)
        same_bits = _bits(train) == _bits(rollout)
        metrics["mismatch/bitwise_equal_fraction"] = masked_mean(same_bits.to(train.dtype), response_mask)
        ess = None
        if correction is not None and correction.spec is not None:
            is_metrics, ess = _is_metrics(correction, response_mask)
            metrics.update({f"rollout_corr/{key}": value for key, value in is_metrics.items()})
            metrics["mismatch/corrected_fraction"] = _corrected_fraction(correction, response_mask)
        keys = list(metrics)
        values = torch.stack([torch.as_tensor(metrics[key], dtype=torch.float64) for key in keys]).tolist()
    out = dict(zip(keys, values))
    if ess is not None:  # verl takes the reciprocal in Python, after .item()
        out["rollout_corr/rollout_is_eff_sample_size"] = 1.0 / ess.item()
    return out


def _offpolicy(train: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """verl's compute_offpolicy_metrics, formula for formula (0-d tensors)."""
    mean_train = masked_mean(train, mask, dim=-1)  # (B,)
    mean_rollout = masked_mean(rollout, mask, dim=-1)
    log_ratio = train - rollout
    log_ppl_diff = mean_rollout - mean_train
    log_ratio_safe = log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    log_ratio_sum_safe = masked_sum(log_ratio, mask, dim=-1).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return {
        "training_ppl": torch.exp(-mean_train).mean(),
        "training_log_ppl": (-mean_train).mean(),
        "kl": masked_mean(rollout - train, mask),
        "k3_kl": masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask),
        "rollout_ppl": torch.exp(-mean_rollout).mean(),
        "rollout_log_ppl": (-mean_rollout).mean(),
        "log_ppl_diff": log_ppl_diff.mean(),
        "log_ppl_abs_diff": log_ppl_diff.abs().mean(),
        "log_ppl_diff_max": log_ppl_diff.max(),
        "log_ppl_diff_min": log_ppl_diff.min(),
        "ppl_ratio": torch.exp(log_ppl_diff).mean(),
        "chi2_token": masked_mean(torch.exp(log_ratio_safe).square(), mask) - 1.0,
        "chi2_seq": torch.exp(2.0 * log_ratio_sum_safe).mean() - 1.0,
    }


def _is_metrics(correction: Correction, mask: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """verl's compute_is_metrics for threshold C (lower 1/C) and the overall rejection fractions; also ESS's
    denominator, whose reciprocal verl takes in Python."""
    spec, weights, ratio = correction.spec, correction.weights, correction.ratio
    threshold = float(spec.threshold)
    keep = mask.bool()
    metrics: dict[str, torch.Tensor] = {"rollout_is_mean": masked_mean(weights, mask)}
    if spec.level is ISLevel.SEQUENCE:
        log_sum = correction.log_ratio  # (B, 1), unclamped
        metrics["rollout_is_max"] = torch.exp(log_sum.max().clamp(max=LOG_RATIO_BOUND))
        metrics["rollout_is_min"] = torch.exp(log_sum.min())
        log_upper = torch.log(torch.tensor(threshold, device=weights.device))
        log_lower = torch.log(torch.tensor(1.0 / threshold, device=weights.device))
        metrics["rollout_is_ratio_fraction_high"] = (log_sum > log_upper).float().mean()
        metrics["rollout_is_ratio_fraction_low"] = (log_sum < log_lower).float().mean()
    else:
        metrics["rollout_is_ratio_fraction_high"] = masked_mean((ratio > threshold).float(), mask)
        metrics["rollout_is_ratio_fraction_low"] = masked_mean((ratio < 1.0 / threshold).float(), mask)
        metrics["rollout_is_max"] = weights.masked_fill(~keep, float("-inf")).max()
        metrics["rollout_is_min"] = weights.masked_fill(~keep, float("inf")).min()
    bounded = weights.clamp(min=0.0, max=threshold)
    bounded_mean = masked_mean(bounded, mask)
    if mask.sum() > 1:
        variance = masked_mean(bounded.square(), mask) - bounded_mean.square()
        metrics["rollout_is_std"] = torch.sqrt(variance.clamp(min=0.0))
    else:
        metrics["rollout_is_std"] = torch.zeros(())
    ess_denominator = masked_mean((bounded / (bounded_mean + 1e-8)).square(), mask)
    if spec.mode is ISMode.MASK:
        dropped = keep & ~correction.mask.bool()
        metrics["rollout_rs_masked_fraction"] = masked_mean(1 - correction.mask.to(weights.dtype), mask)
        metrics["rollout_rs_seq_masked_fraction"] = dropped.any(dim=-1).float().mean()
    return metrics, ess_denominator


def _corrected_fraction(correction: Correction, mask: torch.Tensor) -> torch.Tensor:
    """Response tokens the correction changed: dropped by the mask, or (truncate mode) weight cut to C."""
    keep = mask.bool()
    if correction.spec.mode is ISMode.MASK:
        changed = keep & ~correction.mask.bool()
    else:
        changed = keep & (correction.ratio > float(correction.spec.threshold))
    return masked_mean(changed.to(correction.weights.dtype), mask)


def _bits(values: torch.Tensor) -> torch.Tensor:
    """The raw bits of a float tensor, as integers of the same width."""
    return values.contiguous().view(_BITS[values.element_size()])
