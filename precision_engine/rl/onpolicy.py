"""The on-policy check: do the logprobs the engine records while sampling equal the trainer's?

`precision check` runs this beside its prefill/decode rows because it measures the path an RL step takes:

    rollout  `pipeline.prepare` builds our decoder for the rollout phase (FP8 KV scales calibrated on the
             prompts when the policy has an FP8 cache); the engine samples from random prompts of ragged
             lengths, n sequences in groups of two (prefill once, fork), and records each token's logprob
    score    the same model and weights, rewritten for the train phase, in train mode with autograd on (as
             `rl.trainer` runs it), scores the sampled sequences with `token_logprobs`, in batches of another
             size (`score_batch`), LEFT-padded (the engine pads right) with one extra padding column, rows
             shuffled; it rounds k/v through the rollout's FP8 KV scales only when the plan is identical in
             both phases, as the trainer does

Identity is promised when the plan is identical for every module and `numerics.batch_invariant` is on: then
every op gives a row the same bits in a decode step and in the scoring forward, and every sampled token's two
logprobs must have equal bits. The decoder runs Llama-family dense models; a MoE or another architecture is
refused with UnsupportedError before any weight is built, so check can skip the row and say why.
"""

from __future__ import annotations

from functools import partial

import torch

from precision_engine.compile.plan import Plan
from precision_engine.errors import UnsupportedError, UsageError
from precision_engine.models.decoder import Decoder, DecoderConfig, load_decoder
from precision_engine.models.loader import resolve_config
from precision_engine.pipeline import prepare
from precision_engine.rewrite import apply
from precision_engine.rl.engine import Engine, Rollout
from precision_engine.rl.logprobs import token_logprobs
from precision_engine.rl.mismatch import mismatch_metrics

PATH = "sampled (engine -> trainer)"
GROUP = 2  # samples per prompt when n is even: the engine's fork is on the measured path


def sampled_logprob_check(
    plan: Plan,
    model_spec: str,
    *,
    n: int,
    max_new_tokens: int,
    seed: int,
    device: str,
    temperature: float = 1.0,
    prompt_len: int,
    score_batch: int,
    random_weights: bool = False,
) -> dict:
    """Sample `n` sequences of `max_new_tokens` tokens (prompts of 1..`prompt_len` random tokens, from `seed`)
    under `plan`'s rollout phase and score them under its train phase; the row `check` prints, as a dict:

    path, tokens (sampled tokens compared), max_abs_dlogp, mean_abs_dlogp, mean_kl (verl's rollout_corr/kl,
    the k1 estimate of KL(pi_rollout || pi_train)), bitwise_fraction (tokens whose two logprobs have equal bits),
    bitwise, identity_promised, why_not_promised, and the settings (samples, max_new_tokens, score_batch,
    temperature, seed). `random_weights` builds random weights even for a model directory with weights.
    """
    if n < 1 or max_new_tokens < 1 or prompt_len < 1 or score_batch < 1:
        raise UsageError(f"samples, max new tokens, prompt length and score batch must be >= 1, got n={n}, "
                         f"max_new_tokens={max_new_tokens}, prompt_len={prompt_len}, score_batch={score_batch}")
    config = resolve_config(model_spec)
    try:
        DecoderConfig.from_hf(config)
    except UnsupportedError as err:
        raise UnsupportedError(f"the sampled check needs the built-in engine: {err}") from None
    policy = plan.policy
    group = GROUP if n % GROUP == 0 else 1
    prompts = _random_prompts(config["vocab_size"], n // group, prompt_len, seed)
    loader = partial(Decoder.from_config, seed=seed) if random_weights else load_decoder
    ready = prepare(policy, model_spec, phase="rollout", device=device, seed=seed,
                    loader=partial(loader, batch_invariant=policy.numerics.batch_invariant),
                    calibration_ids=prompts, calibration_source="the sampled check's prompts")
    model, plan = ready.model, ready.plan
    model.kv_scales = None  # the engine's cache does the FP8 rounding itself
    rollout = Engine(model, kv_scales=ready.kv_scales).generate(
        prompts, n=group, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed
    )

    apply(plan, model, "train")
    model.kv_scales = ready.kv_scales if plan.all_identical else None  # as rl.trainer.train_model
    model.train()
    train_logprobs = _score(model, rollout, score_batch, seed)

    metrics = mismatch_metrics(train_logprobs, rollout.logprobs, rollout.generated_mask)
    why_not = _why_not_promised(plan)
    bitwise_fraction = metrics["mismatch/bitwise_equal_fraction"]
    return {
        "path": PATH,
        "tokens": int(rollout.generated_mask.sum()),
        "max_abs_dlogp": metrics["mismatch/max_abs_dlogp"],
        "mean_abs_dlogp": metrics["mismatch/mean_abs_dlogp"],
        "mean_kl": metrics["rollout_corr/kl"],
        "bitwise_fraction": bitwise_fraction,
        "bitwise": bitwise_fraction == 1.0,
        "identity_promised": not why_not,
        "why_not_promised": why_not,
        "samples": n,
        "max_new_tokens": max_new_tokens,
        "score_batch": score_batch,
        "temperature": temperature,
        "seed": seed,
    }


def _random_prompts(vocab_size: int, count: int, longest: int, seed: int) -> list[list[int]]:
    """`count` prompts of ragged lengths in [1, longest], random token ids (random weights have no tokenizer)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, longest + 1, (count,), generator=generator).tolist()
    return [torch.randint(0, vocab_size, (k,), generator=generator).tolist() for k in lengths]


def _score(model, rollout: Rollout, batch: int, seed: int) -> torch.Tensor:
    """The trainer's logprobs of every rollout row, aligned to the rollout's [N, L]: rows shuffled, `batch` at a
    time, each left-padded to its batch's longest row plus one column."""
    ids, device = rollout.token_ids, rollout.token_ids.device
    lengths = rollout.attention_mask.sum(1).tolist()
    order = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(seed + 1)).tolist()
    aligned = torch.zeros_like(rollout.logprobs)
    with torch.enable_grad():  # the trainer's forward records autograd; its bits are what is compared
        for first in range(0, len(order), batch):
            rows = order[first : first + batch]
            width = max(lengths[i] for i in rows) + 1
            padded = torch.full((len(rows), width), rollout.pad_token_id, dtype=torch.long, device=device)
            mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
            for j, i in enumerate(rows):
                padded[j, width - lengths[i] :] = ids[i, : lengths[i]]
                mask[j, width - lengths[i] :] = 1
            logp = token_logprobs(model, padded, mask, temperature=rollout.temperature).detach()
            for j, i in enumerate(rows):
                aligned[i, : lengths[i]] = logp[j, width - lengths[i] :]
    return aligned


def _why_not_promised(plan: Plan) -> str:
    """Empty when the engine's logprobs must equal the trainer's bit for bit; else the reason."""
    if not plan.all_identical:
        return f"the plan differs in {len(plan.differing())} modules"
    if not plan.policy.numerics.batch_invariant:
        return "numerics.batch_invariant is false: decode and the training forward may sum in other orders"
    return ""


__all__ = ["PATH", "sampled_logprob_check"]
