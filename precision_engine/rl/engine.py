"""Batched generation for RL: prefill each prompt once, fork it into its group of n samples, decode together.

    engine = Engine(model)                                   # a models.decoder.Decoder, rollout phase applied
    rollout = engine.generate(prompts, n=8, max_new_tokens=256, temperature=1.0, eos_token_ids=[2], seed=0)

The engine knows token ids only (the recipe owns text, tokenizer and reward). What it returns (`Rollout`) is
what the trainer consumes: each row is its prompt followed by its response, left-aligned (the layout
`token_logprobs` scores without any shifting), right-padded with `pad_token_id`; `generated_mask` marks the
response tokens, the EOS or stop tokens that ended them included; `logprobs` holds, at each generated token,
the logprob the rollout numerics gave it while sampling (`sampling.sample`), 0 elsewhere.

How a step runs: every row decodes every step until all rows are done (static shapes; a finished row's extra
tokens are discarded), positions are ragged (row b's next token sits at prompt_len[b] + step), and the KV cache
is written at those slots and read up to the longest row only. Per token the Python work is a constant: one
forward, one sample, the stop checks (one comparison per stop sequence) and one host sync to end early when
every row is done. The decode step's shapes depend only on the batch, so it can be captured in a CUDA graph
(reading the whole cache, `read_len = max_len`, instead of the growing prefix).

In batch-invariant mode (`model.batch_invariant`, the policy's `numerics.batch_invariant`) the recorded
logprobs equal, bit for bit, those `rl.logprobs.token_logprobs` computes from one full-sequence forward of the
training-phase model, whatever that forward's batch size, padding side and row order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from precision_engine.errors import UsageError
from precision_engine.numerics.kv_cache import KVScales
from precision_engine.rl.kv_cache import KVCache
from precision_engine.rl.sampling import SamplingParams, sample


@dataclass(frozen=True)
class Rollout:
    """N = len(prompts) * n rows, the n samples of prompt g in rows g*n .. g*n + n - 1; L = longest row.

    token_ids        int64 [N, L]  prompt tokens, then response tokens, then pad_token_id
    attention_mask   bool  [N, L]  prompt and response tokens
    generated_mask   bool  [N, L]  response tokens (the EOS / stop tokens that ended them included)
    logprobs         fp32  [N, L]  rollout logprob of token_ids[b, t] where generated_mask, else 0
    prompt_lengths   int64 [N]
    response_lengths int64 [N]
    group            int64 [N]     index of the row's prompt in the input list
    finished         bool  [N]     ended by EOS or a stop sequence (False: cut at max_new_tokens)
    temperature      the sampling temperature: score with token_logprobs(..., temperature=rollout.temperature)
    """

    token_ids: torch.Tensor
    attention_mask: torch.Tensor
    generated_mask: torch.Tensor
    logprobs: torch.Tensor
    prompt_lengths: torch.Tensor
    response_lengths: torch.Tensor
    group: torch.Tensor
    finished: torch.Tensor
    pad_token_id: int
    temperature: float

    def responses(self) -> list[list[int]]:
        """The generated token ids of each row."""
        return [row[mask].tolist() for row, mask in zip(self.token_ids.cpu(), self.generated_mask.cpu())]


class Engine:
    """Generates with `model` (a `models.decoder.Decoder`); `kv_scales` set makes the KV cache FP8."""

    def __init__(self, model, *, kv_scales: KVScales | None = None, pad_token_id: int = 0) -> None:
        self.model = model
        self.kv_scales = kv_scales
        self.pad_token_id = pad_token_id

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        n: int = 1,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        eos_token_ids: Sequence[int] = (),
        stop_sequences: Sequence[Sequence[int]] = (),
        seed: int = 0,
    ) -> Rollout:
        """n samples per prompt, each ending at an EOS id, after a stop sequence, or at max_new_tokens."""
        params = SamplingParams(temperature, top_p, top_k)
        if n < 1 or max_new_tokens < 1:
            raise UsageError(f"n and max_new_tokens must be >= 1, got n={n}, max_new_tokens={max_new_tokens}")
        if not prompts or any(len(p) == 0 for p in prompts):
            raise UsageError("generate needs at least one prompt, each of at least one token")
        if any(len(s) == 0 for s in stop_sequences):
            raise UsageError("stop sequences must not be empty")
        device = self.model.model.embed_tokens.weight.device
        pad = self.pad_token_id

        # Prefill: each prompt once, right-padded, its logits at its last token.
        prompt_len = torch.tensor([len(p) for p in prompts], device=device)
        longest = int(prompt_len.max())
        prompt_ids = torch.full((len(prompts), longest), pad, dtype=torch.long, device=device)
        for i, p in enumerate(prompts):
            prompt_ids[i, : len(p)] = torch.tensor(list(p), dtype=torch.long)
        prefill = KVCache.for_model(self.model, len(prompts), longest, scales=self.kv_scales)
        positions = torch.arange(longest, device=device).expand(len(prompts), longest)
        logits = self.model.forward_cached(
            prompt_ids, positions, prompt_len, prefill, read_len=longest, logits_index=prompt_len - 1
        )

        # Fork: row b is sample b % n of prompt b // n.
        group = torch.arange(len(prompts), device=device).repeat_interleave(n)
        rows = len(group)
        cache = KVCache.for_model(self.model, rows, longest + max_new_tokens, scales=self.kv_scales)
        cache.fork(prefill, group, longest)
        del prefill
        logits, start = logits[group], prompt_len[group]

        generator = torch.Generator(device=device).manual_seed(seed)
        stops = _StopCheck(eos_token_ids, stop_sequences, device)
        tokens = torch.full((rows, max_new_tokens), pad, dtype=torch.long, device=device)
        logprobs = torch.zeros((rows, max_new_tokens), dtype=torch.float32, device=device)
        finished = torch.zeros(rows, dtype=torch.bool, device=device)
        response_len = torch.full((rows,), max_new_tokens, dtype=torch.long, device=device)
        for step in range(max_new_tokens):
            token, logprob = sample(logits, params, generator)
            tokens[:, step], logprobs[:, step] = token, logprob
            hit = stops(tokens, step) & ~finished
            response_len = torch.where(hit, step + 1, response_len)
            finished |= hit
            if step + 1 == max_new_tokens or bool(finished.all()):
                break
            pos = start + step  # where `token` sits in each row
            logits = self.model.forward_cached(
                token[:, None], pos[:, None], pos + 1, cache, read_len=longest + step + 1
            )[:, 0]
        return self._assemble(prompt_ids[group], start, tokens, logprobs, response_len, group, finished, temperature)

    def _assemble(self, prompt_ids, prompt_len, tokens, logprobs, response_len, group, finished, temperature):
        """[N, L] rows: prompt, response, padding (see Rollout)."""
        total = int((prompt_len + response_len).max())
        cols = torch.arange(total, device=tokens.device)
        in_prompt = cols < prompt_len[:, None]
        rel = cols - prompt_len[:, None]
        generated = (rel >= 0) & (rel < response_len[:, None])
        at = rel.clamp(0, tokens.shape[1] - 1)
        prompt = torch.nn.functional.pad(prompt_ids, (0, total - prompt_ids.shape[1]), value=self.pad_token_id)
        ids = torch.where(in_prompt, prompt, torch.where(generated, tokens.gather(1, at), self.pad_token_id))
        return Rollout(
            token_ids=ids,
            attention_mask=in_prompt | generated,
            generated_mask=generated,
            logprobs=torch.where(generated, logprobs.gather(1, at), 0.0),
            prompt_lengths=prompt_len,
            response_lengths=response_len,
            group=group,
            finished=finished,
            pad_token_id=self.pad_token_id,
            temperature=temperature,
        )


class _StopCheck:
    """Which rows the token just written at `step` ends: an EOS id, or the tail of a stop sequence."""

    def __init__(self, eos_token_ids: Sequence[int], stop_sequences: Sequence[Sequence[int]], device) -> None:
        self.eos = torch.tensor(list(eos_token_ids), dtype=torch.long, device=device)
        self.sequences = [torch.tensor(list(s), dtype=torch.long, device=device) for s in stop_sequences]

    def __call__(self, tokens: torch.Tensor, step: int) -> torch.Tensor:
        hit = torch.isin(tokens[:, step], self.eos)
        for seq in self.sequences:
            if len(seq) <= step + 1:
                hit |= (tokens[:, step + 1 - len(seq) : step + 1] == seq).all(-1)
        return hit


__all__ = ["Engine", "Rollout"]
