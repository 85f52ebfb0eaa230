"""`GRPOTrainer._update`: the micro-batched step equals verl's loss on the whole batch, token-mean dividing by the
tokens the correction keeps; a non-finite gradient skips the step. A float64 toy model; logprobs are fp32 (as
`token_logprobs` gives them), so micro-batched sums compare to the whole batch's within 1e-5 relative."""

from __future__ import annotations

import types

import pytest
import torch

from precision_engine.policy.model import ImportanceSampling, ISLevel, ISMode
from precision_engine.rl.correction import compute_correction
from precision_engine.rl.logprobs import token_logprobs
from precision_engine.rl.losses import GRPOLossConfig, policy_loss
from precision_engine.rl.trainer import GRPOConfig, GRPOTrainer

ROWS, WIDTH, PROMPT, VOCAB = 6, 9, 2, 13


class Toy(torch.nn.Module):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with torch.random.fork_rng():  # its weights, whatever ran before
            torch.manual_seed(seed)
            self.embed = torch.nn.Embedding(VOCAB, 16, dtype=torch.float64)
            self.head = torch.nn.Linear(16, VOCAB, dtype=torch.float64)

    def forward(self, input_ids, attention_mask=None):
        return types.SimpleNamespace(logits=self.head(torch.tanh(self.embed(input_ids))))


def _rollout(model, seed: int, noise: float):
    """Right-padded rows of 2..7 generated tokens, rollout logprobs = training ones + noise (a large mismatch)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, WIDTH - PROMPT + 1, (ROWS,), generator=g)
    ids = torch.randint(1, VOCAB, (ROWS, WIDTH), generator=g)
    positions = torch.arange(WIDTH)
    attention = (positions < PROMPT + lengths[:, None]).long()
    generated = (positions >= PROMPT) & attention.bool()
    ids = ids * attention
    with torch.no_grad():
        train = token_logprobs(model, ids, attention)
    rollout = torch.where(generated, train + noise * torch.randn(ROWS, WIDTH, generator=g), 0.0)
    return types.SimpleNamespace(token_ids=ids, attention_mask=attention, generated_mask=generated, logprobs=rollout)


def _trainer(model, spec, optimizer, micro_batch_size=4):
    trainer = GRPOTrainer.__new__(GRPOTrainer)  # the update alone: no tokenizer, engine or rewrite
    trainer.model, trainer.reference, trainer.optimizer = model, None, optimizer
    trainer.plan = types.SimpleNamespace(policy=types.SimpleNamespace(correction=spec))
    trainer.config = GRPOConfig(max_grad_norm=1e30, micro_batch_size=micro_batch_size, loss=GRPOLossConfig())
    trainer.train_model = lambda: model
    return trainer


class Recorder(torch.optim.SGD):
    """Keeps the gradients the step saw."""

    def step(self, closure=None):
        self.grads = [p.grad.clone() for p in self.param_groups[0]["params"]]
        return super().step(closure)


@pytest.mark.parametrize("level", [ISLevel.TOKEN, ISLevel.SEQUENCE])
def test_token_mean_under_mis_divides_by_the_kept_tokens(level):
    """It divided by the generated tokens, shrinking every MIS step by kept / generated (0.58 and 0.42 here)."""
    spec = ImportanceSampling(level=level, mode=ISMode.MASK, threshold=2.0, lower_threshold=0.5)
    model = Toy()
    rollout = _rollout(model, seed=3, noise=0.8)
    advantages = torch.randn(ROWS, generator=torch.Generator().manual_seed(4))
    optimizer = Recorder(model.parameters(), lr=0.0)
    _, metrics = _trainer(model, spec, optimizer)._update(rollout, advantages)

    logprobs = token_logprobs(model, rollout.token_ids, rollout.attention_mask)
    correction = compute_correction(spec, logprobs.detach(), rollout.logprobs, rollout.generated_mask.float())
    kept = int(correction.mask.sum())
    assert 0 < kept < int(rollout.generated_mask.sum())  # the case under test: some tokens rejected
    loss, _ = policy_loss(logprobs, logprobs.detach(), advantages, rollout.generated_mask.float(),
                          correction=correction, num_tokens=kept, num_sequences=ROWS)
    loss.backward()
    for got, param in zip(optimizer.grads, model.parameters()):
        # fp32 sums in another order: an entry that cancels to near 0 keeps an error of the gradient's own scale
        torch.testing.assert_close(got, param.grad, rtol=1e-5, atol=1e-5 * float(param.grad.abs().max()))
    assert metrics["actor/pg_loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert metrics["actor/skipped_update"] == 0.0


@pytest.mark.parametrize("mode", [ISMode.TRUNCATE, ISMode.MASK])
def test_a_nan_rollout_logprob_never_reaches_the_weights(mode):
    """One NaN rollout logprob made every parameter NaN: truncation keeps the token (NaN gradient: the step is now
    skipped, as verl's engines skip it), masking rejects it (a NaN weight times the masked gradient's 0 was NaN:
    the step now runs with finite gradients)."""
    spec = ImportanceSampling(level=ISLevel.TOKEN, mode=mode, threshold=2.0)
    model = Toy()
    rollout = _rollout(model, seed=5, noise=0.01)
    rollout.logprobs[0, PROMPT] = float("nan")
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    advantages = torch.randn(ROWS, generator=torch.Generator().manual_seed(6))
    _, metrics = _trainer(model, spec, optimizer)._update(rollout, advantages)
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert metrics["actor/skipped_update"] == (1.0 if mode is ISMode.TRUNCATE else 0.0) and changed == (
        mode is ISMode.MASK)
