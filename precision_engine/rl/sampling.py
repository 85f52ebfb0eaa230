"""Token sampling for the rollout engine: temperature, top-k, top-p, from a seeded torch.Generator.

The logprob recorded for a sampled token is `invariant.log_softmax(logits, temperature)` at that token: the
full temperature-scaled distribution, as verl's `rollout_log_probs` and the trainer's `token_logprobs` compute
it. top-k / top-p truncation is NOT in the logprob (it only restricts which tokens can be drawn), so with
truncation on, the recorded logprob is that of the untruncated policy the trainer optimises, as in verl.
Temperature 0 is greedy decoding (argmax of the logits) and records the logprob at temperature 1.

Drawing uses the Gumbel-max trick, argmax(logp + Gumbel noise), one uniform per (row, vocabulary entry): an
exact sample of softmax(logp) with static shapes and no host sync (CUDA-graph friendly), and rows of one group
get independent noise, so their samples differ.

On CUDA, greedy or without truncation, `numerics.triton_sampling.sample` does it in three device ops
(torch.rand with the same generator and shape, so a CUDA graph's registered generator advances as before, and
two kernels): the argmax of y - log(-log u), y = logits / temperature, which differs from logp + noise by a
per-row constant, and the token's logprob with the bits of `invariant.log_softmax`, never materialising the
[N, V] logprobs. Rounding puts the argmax of y + noise and of logp + noise apart only where two tokens' scores
are within a few ulps, so for a seed it draws what the torch ops draw but for such near-ties. The CPU runs the
torch ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from precision_engine.errors import UsageError
from precision_engine.numerics import invariant


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0: greedy; top_k 0 and top_p 1.0: no truncation."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise UsageError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise UsageError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise UsageError(f"top_k must be >= 0 (0: off), got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def logprob_temperature(temperature: float) -> float:
    """The temperature logprobs are computed at: the sampling one, or 1 for greedy decoding."""
    return 1.0 if temperature == 0 else temperature


def sample(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N, V] -> (tokens int64 [N], their logprobs fp32 [N]) per the module docstring."""
    temperature = logprob_temperature(params.temperature)
    if logits.is_cuda and (params.greedy or not _truncates(params, logits.shape[-1])):
        fused = _fused_sampler()
        if fused is not None:
            uniform = None if params.greedy else _uniform(logits.shape, generator, logits.device)
            return fused.sample(logits, temperature, uniform)
    logp = invariant.log_softmax(logits, temperature)
    if params.greedy:
        tokens = logits.argmax(-1)
    else:
        drop = _truncated(logp, params)
        scores = logp if drop is None else logp.masked_fill(drop, -math.inf)
        tokens = (scores - torch.log(-torch.log(_uniform(logp.shape, generator, logp.device)))).argmax(-1)
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]


def _uniform(shape: torch.Size, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """One uniform per (row, vocabulary entry): both paths draw the same numbers from the same generator."""
    return torch.rand(shape, generator=generator, device=device, dtype=torch.float32)


def _truncates(params: SamplingParams, vocab: int) -> bool:
    return 0 < params.top_k < vocab or params.top_p < 1


def _fused_sampler():
    """`numerics.triton_sampling`, or None where Triton is not installed (then CUDA runs the torch ops)."""
    try:
        from precision_engine.numerics import triton_sampling
    except ImportError:
        return None
    return triton_sampling


def _truncated(logp: torch.Tensor, params: SamplingParams) -> torch.Tensor | None:
    """Mask [N, V] of the tokens top-k / top-p exclude (the most likely token is never excluded); None when
    neither is on (no [N, V] pass per step for nothing)."""
    if not _truncates(params, logp.shape[-1]):
        return None
    drop = torch.zeros_like(logp, dtype=torch.bool)
    if 0 < params.top_k < logp.shape[-1]:
        kth = logp.topk(params.top_k, dim=-1).values[:, -1:]
        drop |= logp < kth
    if params.top_p < 1:
        sorted_logp, order = logp.sort(-1, descending=True)
        probs = sorted_logp.exp()
        before = probs.cumsum(-1) - probs  # mass of the strictly more likely tokens
        drop |= torch.zeros_like(drop).scatter(-1, order, before >= params.top_p)
    return drop


__all__ = ["SamplingParams", "logprob_temperature", "sample"]
