"""The trainer's logprobs: one full-sequence forward (teacher forcing) of the training-phase model.

`token_logprobs` applies the very function the sampler records its logprobs with
(`invariant.log_softmax(logits, temperature)`, see `rl.sampling`), so under `numerics.batch_invariant` a
generated token's logprob here equals the rollout's bit for bit, whatever the batch size, padding side and row
order of the scoring batch. Differentiable: the policy loss backpropagates through it.

Memory: the fp32 log-softmax of a whole micro-batch is rows x V x 4 bytes per temporary (32 x 384 rows of the
8B's 128,256 columns: 6.3 GB each, several of them and their gradients under autograd), which ran an H200 out of
memory. `_PickedLogprob` runs `invariant.log_softmax` on CHUNK_ROWS rows at a time, keeps only the picked
column, and in backward recomputes each chunk's softmax from the saved logits. Cutting rows changes no bit:
both implementations of `invariant.log_softmax` are row-wise (the torch one reduces each row over fixed vocab
chunks, tests/numerics/test_invariant.py; the Triton one runs a program per (row, vocab chunk) and combines a
row's partials alone, `numerics.triton_sampling`), so a row's logprobs do not depend on the rows beside it.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from precision_engine.errors import OperandError
from precision_engine.numerics import invariant
from precision_engine.rl.sampling import logprob_temperature

# Rows (token positions) per log-softmax call. Live fp32 temporaries are a few x CHUNK_ROWS x V: ~0.5 GB each at
# V = 128,256, against 6.3 GB for a 32 x 384 micro-batch at once; 1,024 rows still fill a GPU and a 12,288-row
# micro-batch costs 12 calls (a handful of launches each) forward and 12 backward.
CHUNK_ROWS = 1024


def token_logprobs(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *, temperature: float = 1.0,
    chunk_rows: int = CHUNK_ROWS,
) -> torch.Tensor:
    """fp32 [N, L]: out[b, t] = log p(input_ids[b, t] | input_ids[b, :t]) at `temperature` (0: greedy
    rollout, scored at 1), for every token with a real token before it; 0 elsewhere (padding, first tokens).

    `model(input_ids, attention_mask)` returns logits [N, L, V] (our Decoder) or an object with `.logits`.
    `chunk_rows`: token positions per log-softmax call (see CHUNK_ROWS); the result's bits do not depend on it.
    """
    out = model(input_ids, attention_mask)
    logits = getattr(out, "logits", out)
    n, length, vocab = logits.shape
    # Every position scores the next token; the last one's target is a placeholder, dropped below. Scoring all
    # N x L rows keeps `logits` a view (logits[:, :-1] would be copied to flatten it).
    targets = torch.cat((input_ids[:, 1:], input_ids[:, :1]), dim=1).reshape(-1)
    picked = picked_logprobs(logits.reshape(-1, vocab), targets, logprob_temperature(temperature),
                             chunk_rows=chunk_rows).view(n, length)[:, :-1]
    mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    picked = torch.where(mask[:, 1:] & mask[:, :-1], picked, 0.0)
    return torch.cat((picked.new_zeros(n, 1), picked), dim=1)


def picked_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float, *,
                    chunk_rows: int = CHUNK_ROWS) -> torch.Tensor:
    """fp32 [R]: invariant.log_softmax(logits [R, V], temperature)[r, targets[r]], bit for bit, computed
    `chunk_rows` rows at a time; differentiable w.r.t. logits (`_PickedLogprob`)."""
    if chunk_rows < 1:
        raise OperandError(f"picked_logprobs: chunk_rows must be >= 1, got {chunk_rows}")
    return _PickedLogprob.apply(logits, targets, float(temperature), chunk_rows)


class _PickedLogprob(torch.autograd.Function):
    """Forward: `invariant.log_softmax` chunk by chunk, the target column kept. Backward: d logp[r, k] / dx[r] =
    (onehot(k) - softmax(x[r] / t)) / t, with the softmax exp(logp) of the same log_softmax recomputed per chunk
    from the saved logits, in fp32, as (g * onehot - softmax * g) / t: the arithmetic of the Triton log_softmax's
    own backward (`triton_sampling._LogSoftmax`) for this one-hot upstream gradient, so on CUDA the gradient
    equals autograd's through the whole-batch log_softmax and a gather (torch.equal: 0 - y there, -y here, differ
    only in a zero's sign). Returned in the logits' dtype."""

    @staticmethod
    def forward(ctx, logits, targets, temperature, chunk_rows):
        ctx.save_for_backward(logits, targets)
        ctx.temperature, ctx.chunk_rows = temperature, chunk_rows
        out = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        for rows in _chunks(logits.shape[0], chunk_rows):
            logp = invariant.log_softmax(logits[rows], temperature)
            out[rows] = logp.gather(-1, targets[rows, None])[:, 0]
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        logits, targets = ctx.saved_tensors
        grad_logits = torch.empty_like(logits)
        for rows in _chunks(logits.shape[0], ctx.chunk_rows):
            g = grad[rows, None]
            dx = invariant.log_softmax(logits[rows], ctx.temperature).exp_().mul_(g).neg_()
            dx.scatter_add_(-1, targets[rows, None], g).div_(ctx.temperature)
            grad_logits[rows] = dx
        return grad_logits, None, None, None


def _chunks(total: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, total)) for start in range(0, total, size)]


__all__ = ["CHUNK_ROWS", "picked_logprobs", "token_logprobs"]
