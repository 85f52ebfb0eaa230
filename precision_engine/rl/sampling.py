"""Token sampling for the rollout engine: temperature, top-k, top-p, from a seeded torch.Generator.

The logprob recorded for a sampled token is `invariant.log_softmax(logits, temperature)` at that token: the
full temperature-scaled distribution, as verl's `rollout_log_probs` and the trainer's `token_logprobs` compute
it. top-k / top-p truncation is NOT in the logprob (it only restricts which tokens can be drawn), so with
truncation on, the recorded logprob is that of the untruncated policy the trainer optimises, as in verl.
Temperature 0 is greedy decoding (argmax of the logits) and records the logprob at temperature 1. With both
top-k and top-p on, each is measured on the full tempered distribution and a token survives only both (as
SGLang's torch sampler masks them); vLLM and transformers renormalise after top-k before measuring top-p.

Drawing uses the Gumbel-max trick, argmax(logp + Gumbel noise), one uniform per (row, vocabulary entry): an
exact sample of softmax(logp) with static shapes and no host sync (CUDA-graph friendly), and rows of one group
get independent noise, so their samples differ.

On CUDA, greedy or without truncation, `numerics.triton_sampling.sample` does it in four device ops
(torch.rand with the same generator and shape, so a CUDA graph's registered generator advances as before, its
clamp, and two kernels): the argmax of y - log(-log u), y = logits / temperature, which differs from logp + noise
by a per-row constant, and the token's logprob with the bits of `invariant.log_softmax`, never materialising the
[N, V] logprobs. Rounding puts the argmax of y + noise and of logp + noise apart only where two tokens' scores
are within a few ulps, so for a seed it draws what the torch ops draw but for such near-ties. The CPU runs the
torch ops. Both paths read the uniforms `_uniform` makes, torch.rand raised to the smallest normal float: a 0
(one draw in 2**24) would make its token's score -inf, and where truncation leaves that token alone, every
score -inf and the argmax a token outside the allowed set.

What a seed fixes: a step draws one [rows, V] block of uniforms from the engine's generator, row after row, so a
row's noise is set by the seed, the step, the row's index and the number of rows. The same prompts in the same
order, with the same n, seed and parameters, draw the same samples; a prompt's samples change when the other
prompts, their order or n change (its rows read other uniforms). In batch-invariant mode a prompt's logits do not
depend on the batch, so the logprob recorded for a given token sequence, and greedy decoding (which draws
nothing), do not either. The CPU and CUDA generators draw different numbers for one seed.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from precision_engine.errors import UsageError
from precision_engine.numerics import invariant


# The smallest positive temperature: logits / temperature overflows fp32 near 1e-38 (token 0, NaN logprobs), and
# vLLM's way out, greedy below 1e-5, would record logprobs at temperature 1 (greedy's) where the trainer scores at
# the configured one. So 0 < temperature < MIN_TEMPERATURE is refused.
MIN_TEMPERATURE = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0: greedy; top_k 0 and top_p 1.0: no truncation. top_k -1 (off in verl, vLLM and SGLang) is
    stored as 0, so equal parameters compare (and key a captured decode graph) equal."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise UsageError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise UsageError(f"temperature must be 0 (greedy) or >= {MIN_TEMPERATURE}, got {self.temperature} "
                             "(hint: temperature=0 for greedy decoding)")
        if not 0 < self.top_p <= 1:
            raise UsageError(f"top_p must be in (0, 1], got {self.top_p}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, numbers.Integral) or self.top_k < -1:
            raise UsageError(f"top_k must be an int >= 1, or 0 or -1 for off, got {self.top_k!r}")
        object.__setattr__(self, "top_k", max(int(self.top_k), 0))

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
    """One uniform per (row, vocabulary entry) in (0, 1): both paths draw the same numbers from the same generator
    and see the same clamp (torch.rand's 0 would give its token a -inf score; see the module docstring)."""
    u = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
    return u.clamp_min_(torch.finfo(torch.float32).tiny)


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


__all__ = ["MIN_TEMPERATURE", "SamplingParams", "logprob_temperature", "sample"]
