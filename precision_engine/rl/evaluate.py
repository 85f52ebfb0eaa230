"""Held-out accuracy: greedy decoding of every problem with the engine, scored by the recipe's reward.

Greedy (temperature 0) and not sampled: one number per model, with no sampling noise between evaluations, so
a rise over the RL steps is the model's and not the sampler's. The model runs whatever phase it is in (the run
evaluates under the policy's rollout numerics, as the policy would be deployed).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from precision_engine.rl.engine import Engine


@torch.no_grad()
def greedy_accuracy(
    model, problems: Sequence, tokenizer, reward_fn, *, max_new_tokens: int, kv_scales=None, batch_size: int = 512
) -> float:
    """Fraction of `problems` whose greedy completion `reward_fn(text, answer)` scores 1."""
    if not problems:
        return float("nan")
    engine = Engine(model, kv_scales=kv_scales, pad_token_id=tokenizer.pad_id)
    correct = 0.0
    for start in range(0, len(problems), batch_size):
        chunk = problems[start : start + batch_size]
        rollout = engine.generate(
            [tokenizer.encode_prompt(p) for p in chunk], n=1, max_new_tokens=max_new_tokens, temperature=0.0,
            eos_token_ids=tokenizer.eos_ids,
        )
        texts = [tokenizer.decode(ids) for ids in rollout.responses()]
        correct += sum(reward_fn(text, p.answer) for text, p in zip(texts, chunk))
    return correct / len(problems)
