"""Importance-sampling correction of the train/rollout mismatch, from the policy's `correction` block.

The rollout engine samples from pi_rollout; the loss is computed for pi_train (the training-phase model's
logprobs of the same tokens, before the update: verl's `old_log_prob`). With r = pi_train / pi_rollout, taken
in log space as log r = train_logprobs - rollout_logprobs:

- level `token`: each response token has its own log r, clamped to [-20, 20] before `exp`.
- level `sequence`: every token of a sequence shares R = exp(clamp(sum over its response tokens of log r)),
  the sum taken before the clamp.
- mode `truncate` (TIS, FP8-RL's default): weight = min(r, C), C = `threshold`; the mask is the response mask.
- mode `mask` (MIS): tokens (or whole sequences) with r outside [lo, hi], hi = `threshold`, lo =
  `lower_threshold` or 1/hi, leave the loss: they are removed from the mask, so they also leave the token-mean
  denominator and the KL term. The kept ones carry the weight min(r, hi), which is r up to the rounding at the
  boundary. The bound is tested in log space on the negated log ratio, as verl's `*_k1` rejection does:
  log(1/hi) <= -log r <= log(1/lo), with the clamped token log ratios (summed over the sequence at sequence
  level, a sum of clamped terms, unlike the weight's clamp of the sum).

Weights are detached and zero on padding; the loss multiplies the per-token clipped policy-gradient loss by
them and aggregates with the returned mask (`losses.policy_loss`), which is where verl 0.9.1 applies them.

How each mode is written in verl 0.9.1 (`algorithm.rollout_correction`, decoupled mode: `bypass_mode: false`,
no batch normalisation), each formula equal to `verl.trainer.ppo.rollout_corr_helper`'s bit for bit:

    token    truncate C      rollout_is: token     rollout_is_threshold: C   rollout_rs: null
    sequence truncate C      rollout_is: sequence  rollout_is_threshold: C   rollout_rs: null
    token    mask [lo, hi]   rollout_is: token     rollout_is_threshold: hi  rollout_rs: token_k1
                             rollout_rs_threshold: "<1/hi>_<1/lo>"
    sequence mask [lo, hi]   rollout_is: sequence  rollout_is_threshold: hi  rollout_rs: seq_sum_k1
                             rollout_rs_threshold: "<1/hi>_<1/lo>"
    off                      rollout_is: null      rollout_rs: null (verl still logs the mismatch metrics)

The mask bounds are inverted because verl's k1 statistic is -log r: `token_k1` with "a_b" keeps
1/b <= r <= 1/a. The mask modes are verl's own MIS shape (its Seq-MIS preset `decoupled_seq_is_rs` is sequence
IS at 2.0 plus `seq_sum_k1` "0.5_2.0"). Not IcePop (`rollout_is_threshold: "lo_hi"`): IcePop zeroes the weights
but keeps the tokens in the response mask, so they still count in the token-mean denominator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from precision_engine.errors import UnsupportedError
from precision_engine.policy.model import CorrectionSpec, ImportanceSampling, ISLevel, ISMode
from precision_engine.rl.masked import masked_sum

# exp(20) ~ 4.9e8: verl's SAFETY_BOUND on a log ratio before it is exponentiated.
LOG_RATIO_BOUND = 20.0


@dataclass(frozen=True)
class Correction:
    """What the policy-gradient loss applies, and what the metrics report about it.

    `weights` (B, T) multiply the per-token pg loss (None when the policy has no correction); `mask` (B, T)
    replaces the response mask in the loss (the response mask minus rejected tokens, in its dtype). `ratio` is
    the IS ratio before truncation or masking, zero on padding (verl's raw weights); `log_ratio` the unclamped
    log ratio the weights came from: (B, T) per token, or (B, 1) summed per sequence. All are detached.
    """

    spec: ImportanceSampling | None
    weights: torch.Tensor | None
    mask: torch.Tensor
    ratio: torch.Tensor | None = None
    log_ratio: torch.Tensor | None = None


def mask_bounds(spec: ImportanceSampling) -> tuple[float, float]:
    """The kept ratio range [lo, hi] of mask mode: hi = threshold, lo = lower_threshold or 1/threshold."""
    hi = float(spec.threshold)
    return (1.0 / hi if spec.lower_threshold is None else float(spec.lower_threshold)), hi


def compute_correction(
    spec: CorrectionSpec | ImportanceSampling | None,
    train_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
) -> Correction:
    """IS weights and loss mask for (B, T) logprobs of the sampled tokens; `response_mask` marks response tokens."""
    spec = spec.importance_sampling if isinstance(spec, CorrectionSpec) else spec
    if train_logprobs.shape != rollout_logprobs.shape or train_logprobs.shape != response_mask.shape:
        raise ValueError(f"logprob and mask shapes differ: train {tuple(train_logprobs.shape)}, "
                         f"rollout {tuple(rollout_logprobs.shape)}, mask {tuple(response_mask.shape)}")
    if spec is None:
        return Correction(spec=None, weights=None, mask=response_mask)
    _check(spec)
    with torch.no_grad():
        log_ratio = train_logprobs.detach() - rollout_logprobs.detach()
        if spec.level is ISLevel.TOKEN:
            log_ratio_for_weights = log_ratio
            ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
        else:  # one weight per sequence: the product of its token ratios, taken as a sum of logs
            log_ratio_for_weights = masked_sum(log_ratio, response_mask, dim=-1).unsqueeze(-1)  # (B, 1)
            ratio = torch.exp(log_ratio_for_weights.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)).expand_as(log_ratio)
        ratio = ratio * response_mask
        weights = ratio.clamp(max=float(spec.threshold))
        mask = response_mask
        if spec.mode is ISMode.MASK:
            mask = (response_mask * _kept(spec, log_ratio, response_mask)).to(response_mask.dtype)
    return Correction(spec=spec, weights=weights, mask=mask, ratio=ratio, log_ratio=log_ratio_for_weights)


def _kept(spec: ImportanceSampling, log_ratio: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """1 where the ratio is inside [lo, hi], 0 outside, as verl's token_k1 / seq_sum_k1 decide it."""
    lo, hi = mask_bounds(spec)
    lower_log, upper_log = math.log(1.0 / hi), math.log(1.0 / lo)
    neg_log_ratio = -log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)  # (B, T)
    if spec.level is ISLevel.TOKEN:
        keep = (neg_log_ratio >= lower_log) & (neg_log_ratio <= upper_log)
    else:
        seq = masked_sum(neg_log_ratio, response_mask, dim=-1)  # (B,)
        keep = ((seq >= lower_log) & (seq <= upper_log)).unsqueeze(-1).expand_as(response_mask)
    return torch.ones_like(response_mask, dtype=log_ratio.dtype) * keep.to(log_ratio.dtype)


def verl_rollout_correction(spec: CorrectionSpec | ImportanceSampling | None) -> dict[str, object]:
    """The verl 0.9.1 config keys (`algorithm.rollout_correction.*`, dotted) that compute this correction.

    Thresholds are Python floats or verl's "lower_upper" strings written with `repr`, so verl parses back the
    exact doubles this module uses; write floats into Hydra overrides with `repr` too.
    """
    spec = spec.importance_sampling if isinstance(spec, CorrectionSpec) else spec
    keys: dict[str, object] = {"rollout_is": None, "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": False,
                               "rollout_rs": None, "rollout_rs_threshold": None, "bypass_mode": False}
    if spec is not None:
        _check(spec)
        keys["rollout_is"] = spec.level.value
        keys["rollout_is_threshold"] = float(spec.threshold)
        if spec.mode is ISMode.MASK:
            lo, hi = mask_bounds(spec)
            keys["rollout_rs"] = "token_k1" if spec.level is ISLevel.TOKEN else "seq_sum_k1"
            keys["rollout_rs_threshold"] = f"{1.0 / hi!r}_{1.0 / lo!r}"
    return {f"algorithm.rollout_correction.{key}": value for key, value in keys.items()}


def _check(spec: ImportanceSampling) -> None:
    """Refuse the settings that have no exact meaning here or in verl (the policy loader rejects them too)."""
    hi = float(spec.threshold)
    if not (math.isfinite(hi) and hi > 1.0):
        raise UnsupportedError(f"importance sampling needs a finite threshold > 1, got {spec.threshold}")
    if spec.mode is ISMode.TRUNCATE and spec.lower_threshold is not None:
        raise UnsupportedError("lower_threshold applies to mode 'mask' only: truncation (TIS, verl's "
                               "rollout_is_threshold as one float) has no lower bound")
    if spec.mode is ISMode.MASK:
        lo, _ = mask_bounds(spec)
        if not (math.isfinite(lo) and 0.0 < lo < 1.0):
            raise UnsupportedError(f"mask mode needs 0 < lower_threshold < 1, got {spec.lower_threshold}")
