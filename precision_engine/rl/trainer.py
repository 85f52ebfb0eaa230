"""One GRPO step with the policy's numerics: sample with the rollout-phase model, score with the training-phase
model, correct the mismatch as the policy says, update the master weights.

    rollout   engine.generate under `apply(plan, model, "rollout")`: n samples per prompt, the logprobs the
              rollout numerics produced while sampling (FP8 KV cache with the current scales if the policy has one)
    reward    the recipe's exact-match reward of each decoded response
    advantage group-normalised (GRPO): (r - mean_group) / (std_group + 1e-6), verl's estimator
    score     token_logprobs under `apply(plan, model, "train")`, micro-batch by micro-batch, with gradients
    loss      clipped policy loss (clip low/high, dual clip), times the policy's IS weights and mask, aggregated
              token-mean over the whole batch (each micro-batch normalised by the global token count, so
              accumulation gives the full-batch gradient; under MIS the tokens kept), plus optional KL to the
              initial model
    update    AdamW on the model's parameters (the policy's master weights), grad-norm clip (a non-finite norm
              skips the step, as in verl), then every FP8 weight cache is invalidated and the FP8 KV scales
              recalibrated when the policy says so

Departures from textbook GRPO (DeepSeekMath) and from the papers:
- One policy update per rollout batch (no PPO epochs, no mini-batches): the "old" logprobs are the training
  forward's own, detached, so the PPO ratio is 1 at the update and clipping only matters through IS; this saves
  the separate old-logprob forward verl runs (which gives the same numbers in this setting).
- The IS ratio is pi_train(old) / pi_rollout per token, as verl's decoupled rollout correction; with identical
  numerics (jetrl_unified in batch-invariant mode) it is exactly 1 and the correction is a no-op by construction.
- Token-mean loss aggregation (verl's default), not DeepSeekMath's per-sequence mean then batch mean.
- KL to a reference is off by default (kl_coef 0, as DAPO and many verl recipes); k1 or k3 when switched on.
- The papers train 8B-32B models for hundreds of steps at 8-16K tokens; the recipe's default is a 2-layer model
  on short arithmetic, so the numbers are a small-scale reproduction of the comparisons, not of the accuracies.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import torch

from precision_engine.errors import UsageError
from precision_engine.numerics.kv_cache import KVScales
from precision_engine.rewrite import apply, invalidate_weight_caches
from precision_engine.rewrite.kv_cache import KVCacheCalibrator
from precision_engine.rl.correction import compute_correction
from precision_engine.rl.engine import Engine, Rollout
from precision_engine.rl.logprobs import token_logprobs
from precision_engine.rl.losses import GRPOLossConfig, grpo_advantages, policy_loss
from precision_engine.rl.mismatch import mismatch_metrics

TRAIN, ROLLOUT = "train", "rollout"
_PARTIAL_SUMS = ("actor/pg_loss", "actor/kl_loss")  # normalised by the global counts: micro-batches add up


@dataclass(frozen=True)
class GRPOConfig:
    """Defaults from a CPU probe of the math recipe (32 x 8 samples, temperature 1, lr 3e-4, one update per
    batch; lr 1e-3 or several updates per batch degraded accuracy)."""

    prompts_per_step: int = 32
    samples_per_prompt: int = 8
    max_new_tokens: int = 6
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    lr: float = 3e-4
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch_size: int = 64  # sequences per forward/backward
    loss: GRPOLossConfig = field(default_factory=GRPOLossConfig)


class GRPOTrainer:
    """Owns the model (one module tree; `apply` switches it between the plan's phases), the optimizer, the
    frozen reference model when KL is on, and the FP8 KV scales. The policy is the plan's: one source, so the
    correction and KV rules cannot disagree with the numerics the plan compiled."""

    def __init__(self, model, plan, tokenizer, reward_fn, config: GRPOConfig, *,
                 calibrator: KVCacheCalibrator | None = None):
        self.model, self.plan, self.tokenizer = model, plan, tokenizer
        policy = plan.policy
        self.reward_fn, self.config = reward_fn, config
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=config.lr, betas=(0.9, 0.999), weight_decay=config.weight_decay
        )
        self.reference = None
        if config.loss.kl_coef > 0:
            self.reference = copy.deepcopy(model).requires_grad_(False)
            apply(plan, self.reference, TRAIN)
        # The training forward rounds k/v through the FP8 cache format only when the phases are unified: then the
        # trainer must see the keys the rollout attended to (jetrl_unified_kv). Otherwise training is BF16 attention.
        self._train_sees_fp8_kv = policy.kv_cache.is_fp8 and plan.all_identical
        if policy.kv_cache.is_fp8 and calibrator is None:
            raise UsageError("an FP8 KV cache needs its calibrator (pipeline.prepare returns it)")
        self.calibrator = calibrator  # already called once by the pipeline: its scales are the first rollout's
        # One engine for the whole run: on CUDA it keeps its captured decode graph (and cache) across steps; new
        # weights and KV scales are copied into the graph's buffers at each generate.
        self.engine = Engine(model, pad_token_id=tokenizer.pad_id)

    @property
    def policy(self):
        return self.plan.policy

    @property
    def kv_scales(self) -> KVScales | None:
        return None if self.calibrator is None else self.calibrator.scales

    @kv_scales.setter
    def kv_scales(self, scales: KVScales | None) -> None:  # a resumed run's scales, from its checkpoint
        if self.calibrator is not None:
            self.calibrator.scales = scales

    # ------------------------------------------------------------------------------------------ phases

    def rollout_model(self):
        apply(self.plan, self.model, ROLLOUT)
        self.model.kv_scales = None  # the engine's cache does the FP8 rounding itself
        return self.model

    def train_model(self):
        apply(self.plan, self.model, TRAIN)
        self.model.kv_scales = self.kv_scales if self._train_sees_fp8_kv else None
        return self.model

    # ------------------------------------------------------------------------------------------ the step

    def step(self, problems, *, seed: int) -> dict[str, float]:
        """One rollout + update on `problems`; returns the step's metrics (verl's names where they exist)."""
        c = self.config
        started = time.perf_counter()
        self.rollout_model()
        self.engine.kv_scales = self.kv_scales
        rollout = self.engine.generate(
            [self.tokenizer.encode_prompt(p) for p in problems], n=c.samples_per_prompt,
            max_new_tokens=c.max_new_tokens, temperature=c.temperature, top_p=c.top_p, top_k=c.top_k,
            eos_token_ids=self.tokenizer.eos_ids, seed=seed,
        )
        rollout_s = time.perf_counter() - started
        texts = [self.tokenizer.decode(ids) for ids in rollout.responses()]
        rewards = torch.tensor(
            [self.reward_fn(text, problems[g].answer) for text, g in zip(texts, rollout.group.tolist())]
        )
        advantages = grpo_advantages(rewards, rollout.group.cpu()).to(rollout.token_ids.device)

        train_started = time.perf_counter()
        train_logprobs, loss_metrics = self._update(rollout, advantages)
        train_s = time.perf_counter() - train_started
        if self.calibrator is not None:  # recalibrates when the policy says so (every_weight_update), else keeps
            self.calibrator.after_weight_update(self.rollout_model())

        mask = rollout.generated_mask
        correction = compute_correction(self.policy.correction, train_logprobs, rollout.logprobs, mask)
        generated = int(mask.sum())
        step_s = time.perf_counter() - started
        return {
            "reward/mean": rewards.mean().item(),
            "reward/std": rewards.std().item() if len(rewards) > 1 else 0.0,
            "response_length/mean": rollout.response_lengths.float().mean().item(),
            **mismatch_metrics(train_logprobs, rollout.logprobs, mask, correction),
            **loss_metrics,
            "throughput/tokens_per_s": generated / step_s,
            "throughput/rollout_tokens_per_s": generated / rollout_s,
            "time/rollout_s": rollout_s,
            "time/train_s": train_s,
            "time/step_s": step_s,
        }

    def _update(self, rollout: Rollout, advantages: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """Micro-batched forward/backward of the clipped, IS-corrected loss, then one optimizer step.
        Returns the training logprobs of the whole batch (detached) and the mean of the loss metrics.

        `token-mean` divides by the tokens the correction keeps (verl replaces its response mask by the mask after
        rejection), a count known only once every micro-batch's training logprobs are: the backward passes divide
        by the generated tokens, then the gradients and loss sums are rescaled by generated / kept. A step whose
        gradient is not finite is skipped, as verl's engines do, and says so (`actor/skipped_update`)."""
        c = self.config
        model = self.train_model()
        model.train()
        mask = rollout.generated_mask
        num_tokens, num_sequences = int(mask.sum()), mask.shape[0]
        kept = 0  # tokens left in the loss after the correction's rejection (MIS), over all micro-batches
        train_logprobs = torch.zeros_like(rollout.logprobs)
        sums: dict[str, float] = {}
        for rows, width in _length_buckets(rollout.attention_mask, c.micro_batch_size):
            ids, attn, row_mask = (t[rows, :width] for t in (rollout.token_ids, rollout.attention_mask, mask))
            logprobs = token_logprobs(model, ids, attn, temperature=c.temperature)
            old = logprobs.detach()
            correction = compute_correction(self.policy.correction, old, rollout.logprobs[rows, :width], row_mask)
            ref = None
            if self.reference is not None:
                with torch.no_grad():
                    ref = token_logprobs(self.reference, ids, attn, temperature=c.temperature)
            loss, metrics = policy_loss(
                logprobs, old, advantages[rows], row_mask, c.loss, correction=correction,
                ref_logprobs=ref, num_tokens=num_tokens, num_sequences=num_sequences,
            )
            loss.backward()
            kept += int(correction.mask.sum())
            train_logprobs[rows, :width] = old
            share = len(rows) / num_sequences  # per-micro-batch means, weighted; the losses are partial sums already
            for key, value in metrics.items():
                sums[key] = sums.get(key, 0.0) + value * (1.0 if key in _PARTIAL_SUMS else share)
        if c.loss.loss_agg_mode == "token-mean" and 0 < kept < num_tokens:
            _rescale(model, sums, num_tokens / kept)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), c.max_grad_norm)
        skipped = not bool(torch.isfinite(grad_norm))  # a NaN/Inf gradient would turn every weight into NaN
        if not skipped:
            self.optimizer.step()
            invalidate_weight_caches(model)
        self.optimizer.zero_grad(set_to_none=True)
        model.eval()
        return train_logprobs, {**sums, "actor/grad_norm": float(grad_norm), "actor/skipped_update": float(skipped)}


def _rescale(model: torch.nn.Module, sums: dict[str, float], factor: float) -> None:
    """Gradients and loss sums divided by the kept tokens instead of the generated ones (`_update`)."""
    with torch.no_grad():
        for param in model.parameters():
            if param.grad is not None:
                param.grad.mul_(factor)
    for key in _PARTIAL_SUMS:
        if key in sums:
            sums[key] *= factor


def _length_buckets(attention_mask: torch.Tensor, size: int) -> list[tuple[torch.Tensor, int]]:
    """Micro-batches of rows of similar length, each with the width it needs (rows are right-padded).

    Scoring a short sum beside a long word problem would pad it to the long one's width; sorting first keeps the
    training forward near the real token count. The logprobs do not change: in batch-invariant mode a row's bits
    do not depend on its batch or padding, and otherwise only the last bits could.
    """
    lengths = attention_mask.sum(dim=1).cpu()
    order = torch.argsort(lengths, stable=True)
    return [(rows.to(attention_mask.device), int(lengths[rows].max())) for rows in order.split(size)]


__all__ = ["GRPOConfig", "GRPOTrainer"]
