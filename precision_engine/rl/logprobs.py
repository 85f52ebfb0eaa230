"""The trainer's logprobs: one full-sequence forward (teacher forcing) of the training-phase model.

`token_logprobs` applies the very function the sampler records its logprobs with
(`invariant.log_softmax(logits, temperature)`, see `rl.sampling`), so under `numerics.batch_invariant` a
generated token's logprob here equals the rollout's bit for bit, whatever the batch size, padding side and row
order of the scoring batch. Differentiable: the policy loss backpropagates through it.
"""

from __future__ import annotations

import torch

from precision_engine.numerics import invariant
from precision_engine.rl.sampling import logprob_temperature


def token_logprobs(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *, temperature: float = 1.0
) -> torch.Tensor:
    """fp32 [N, L]: out[b, t] = log p(input_ids[b, t] | input_ids[b, :t]) at `temperature` (0: greedy
    rollout, scored at 1), for every token with a real token before it; 0 elsewhere (padding, first tokens).

    `model(input_ids, attention_mask)` returns logits [N, L, V] (our Decoder) or an object with `.logits`.
    """
    out = model(input_ids, attention_mask)
    logits = getattr(out, "logits", out)
    n, length, vocab = logits.shape
    logp = invariant.log_softmax(logits[:, :-1].reshape(-1, vocab), logprob_temperature(temperature))
    picked = logp.gather(-1, input_ids[:, 1:].reshape(-1, 1)).view(n, length - 1)
    mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    picked = torch.where(mask[:, 1:] & mask[:, :-1], picked, 0.0)
    return torch.cat((picked.new_zeros(n, 1), picked), dim=1)


__all__ = ["token_logprobs"]
