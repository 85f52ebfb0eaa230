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
is written at those slots. The step (`rl.decode.decode_step`: one forward, one sample, the stop checks) keeps
its state on the device and updates it in place, so there is no per-token host sync beyond the check that every
row is done (every step on the CPU, every SYNC_EVERY steps on the GPU).

On the GPU the step runs in a CUDA graph (`rl.decode.DecodeGraph`) with static shapes: attention reads the
whole cache (`read_len = max_len`: a Python int for the shapes; the kernel stops at each row's live kv_len,
a device value, so slots past it cost nothing and change no bit), the cache length is rounded up to
DECODE_LEN_MULTIPLE, and the graph is captured once per (rows, max_new_tokens, sampling, stops, KV format, mode)
and reused across `generate` calls whose prompts fit its cache (a longer prompt captures a larger one). FP8 weights
are quantized once per weight version (`Fp8Linear` caches Q(W); a new version's bytes are copied into the
buffers the graph reads). `cuda_graphs=False` runs the same static step eagerly: the reference the graph must
equal bit for bit (tests/rl/gpu/test_engine_gpu.py). On the CPU the step runs eagerly and reads the cache up to
the longest row only.

In batch-invariant mode (`model.batch_invariant`, the policy's `numerics.batch_invariant`) the recorded
logprobs equal, bit for bit, those `rl.logprobs.token_logprobs` computes from one full-sequence forward of the
training-phase model, whatever that forward's batch size, padding side and row order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from precision_engine.errors import UsageError
from precision_engine.models.decoder import Decoder
from precision_engine.numerics.kv_cache import KVScales
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.specs import NonFinite
from precision_engine.rewrite import applied_kv_cache
from precision_engine.rl.decode import DecodeGraph, DecodeState, StopCheck, decode_step
from precision_engine.rl.kv_cache import KVCache
from precision_engine.rl.sampling import SamplingParams

SYNC_EVERY = 16  # GPU: decode steps between the host's checks that every row is done (one sync each)
DECODE_LEN_MULTIPLE = 128  # GPU: decode cache lengths are rounded up to this, so one graph serves many prompts


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
    """Generates with `model` (a `models.decoder.Decoder`); `kv_scales` set makes the KV cache FP8, and a model a
    policy was applied to gets them exactly when the policy's kv_cache is FP8 (checked at each generate).

    `cuda_graphs` (GPU only): replay the decode step from a CUDA graph; False runs the same step eagerly."""

    def __init__(self, model, *, kv_scales: KVScales | None = None, pad_token_id: int = 0,
                 cuda_graphs: bool = True) -> None:
        if not isinstance(model, Decoder):  # its KV cache, decode step and graphs are written against our decoder
            raise UsageError(f"Engine runs a models.decoder.Decoder, got {type(model).__name__} (hint: "
                             "pipeline.prepare(..., loader=models.decoder.load_decoder))")
        self.model = model
        self.kv_scales = kv_scales
        self.pad_token_id = pad_token_id
        self.cuda_graphs = cuda_graphs
        self._generators: dict[torch.device, torch.Generator] = {}  # one per device: a graph holds its state
        self._graph: DecodeGraph | None = None  # the last captured decode step

    def _check_kv_cache(self) -> None:
        """The KV cache must be the one the policy applied to the model names (`rewrite.applied_kv_cache`), else
        the rollout's numerics would silently differ from the policy's: kv_scales make it FP8, their absence BF16."""
        policy_cache = applied_kv_cache(self.model)
        if policy_cache is None or policy_cache.is_fp8 == (self.kv_scales is not None):
            return
        if policy_cache.is_fp8:
            raise UsageError(f"the model's policy keeps the KV cache in {policy_cache.dtype.value}, but the engine "
                             "has no kv_scales, so its cache would be BF16 (hint: Engine(model, "
                             "kv_scales=ready.kv_scales), the scales pipeline.prepare calibrated)")
        raise UsageError(f"the engine has kv_scales, so its KV cache would be FP8, but the model's policy keeps it "
                         f"in {policy_cache.dtype.value} (hint: pass kv_scales only for a policy with an FP8 "
                         "kv_cache)")

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
        eos_token_ids: int | Sequence[int] | None = (),
        stop_sequences: Sequence[Sequence[int]] = (),
        seed: int = 0,
    ) -> Rollout:
        """n samples per prompt, each ending at an EOS id (`eos_token_ids`: one id or several), after a stop
        sequence, or at max_new_tokens. `prompts`: a list of token-id lists (or of 1-D tensors), unpadded.

        Reproducibility (the sampling module docstring says why): the same prompts in the same order, with the same
        n, seed and parameters, give the same samples; a prompt's samples change when the other prompts of the
        call, their order or n change, since its rows read other uniforms of each step's draw. In batch-invariant
        mode its logits do not depend on the batch, so neither do the logprobs recorded for a given sequence, nor
        greedy tokens."""
        params = SamplingParams(temperature, top_p, top_k)
        for name, value in (("n", n), ("max_new_tokens", max_new_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} must be an int >= 1, got {value!r}")
        if isinstance(prompts, torch.Tensor):  # its truth value is ambiguous, and a padded batch would not say so
            raise UsageError(f"prompts must be a list of token-id lists (one per prompt, unpadded), got a tensor of "
                             f"shape {tuple(prompts.shape)} (hint: prompts.tolist() when no row is padded)")
        if isinstance(prompts, (str, bytes)) or any(isinstance(p, (str, bytes)) for p in prompts):
            raise UsageError("prompts must be token ids, not text (hint: the tokenizer's encode)")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise UsageError(f"seed must be an int in [0, 2**64), as torch.Generator takes it, got {seed!r}")
        if not prompts or any(len(p) == 0 for p in prompts):
            raise UsageError("generate needs at least one prompt, each of at least one token")
        longest = max(len(p) for p in prompts)
        limit = _max_positions(self.model)
        if limit is not None and longest + max_new_tokens > limit:
            raise UsageError(f"the longest prompt ({longest} tokens) plus max_new_tokens={max_new_tokens} is "
                             f"{longest + max_new_tokens} positions, the model takes at most {limit} "
                             "(max_position_embeddings; hint: shorter prompts or a smaller max_new_tokens)")
        if eos_token_ids is None or isinstance(eos_token_ids, int):  # none, or one id, as transformers takes them
            eos_token_ids = () if eos_token_ids is None else (eos_token_ids,)
        if any(len(s) == 0 for s in stop_sequences):
            raise UsageError("stop sequences must not be empty")
        self._check_kv_cache()
        vocab = self.model.model.embed_tokens.num_embeddings
        # What reaches the embedding (EOS and stop ids are only compared: one outside never matches)
        ids = [("prompt", t) for p in prompts for t in p] + [("pad_token_id", self.pad_token_id)]
        bad = next(((what, t) for what, t in ids if not 0 <= t < vocab), None)
        if bad is not None:  # else an IndexError in the embedding, on a GPU a device-side assert
            raise UsageError(f"{bad[0]}: token id {bad[1]} is outside the vocabulary [0, {vocab})")
        device = self.model.model.embed_tokens.weight.device
        static = _static_shapes(device)
        pad = self.pad_token_id

        # Prefill: each prompt once, right-padded, its logits at its last token.
        prompt_len = torch.tensor([len(p) for p in prompts], device=device)
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
        cache_len = longest + max_new_tokens
        if static:
            cache_len = -(-cache_len // DECODE_LEN_MULTIPLE) * DECODE_LEN_MULTIPLE
        generator = self._generator(device)
        stops = StopCheck(eos_token_ids, stop_sequences, device)
        graph = None
        if static and self.cuda_graphs and max_new_tokens > 1 and _capturable(self.model):  # 1: no decode step
            key = (rows, max_new_tokens, params, tuple(eos_token_ids), tuple(map(tuple, stop_sequences)),
                   None if self.kv_scales is None else tuple(self.kv_scales.k.shape), self.model.batch_invariant)
            graph = self._decode_graph(key, rows, cache_len, max_new_tokens, params, generator, stops)
            cache, state = graph.cache, graph.state
        else:
            cache = KVCache.for_model(self.model, rows, cache_len, scales=self.kv_scales)
            state = DecodeState(rows, max_new_tokens, pad_token_id=pad, device=device)
        cache.fork(prefill, group, longest)
        del prefill
        start = prompt_len[group]
        state.reset(start)

        generator.manual_seed(seed)
        state.record(logits[group], params, generator, stops)
        check_every = SYNC_EVERY if static else 1
        for step in range(1, max_new_tokens):
            if (step - 1) % check_every == 0 and bool(state.finished.all()):
                break
            if graph is not None:
                graph.replay()
            else:
                read_len = cache.max_len if static else longest + step
                decode_step(self.model, cache, state, read_len, params, generator, stops)
        return self._assemble(prompt_ids[group], start, state.tokens.clone(), state.logprobs.clone(),
                              state.response_len.clone(), group, state.finished.clone(), temperature)

    def _generator(self, device: torch.device) -> torch.Generator:
        if device not in self._generators:
            self._generators[device] = torch.Generator(device=device)
        return self._generators[device]

    def _decode_graph(self, key, rows, cache_len, max_new_tokens, params, generator, stops) -> DecodeGraph:
        """The captured decode step for `key`: the last one if its cache holds `cache_len` slots (a longer one
        serves shorter prompts: attention stops at each row's kv_len), else a new capture (the old graph, its
        cache and memory pool are released first)."""
        if self._graph is None or not self._graph.matches(key) or self._graph.cache.max_len < cache_len:
            self._graph = None
            cache = KVCache.for_model(self.model, rows, cache_len, scales=self.kv_scales)
            state = DecodeState(rows, max_new_tokens, pad_token_id=self.pad_token_id, device=cache.k.device)

            def step() -> None:
                decode_step(self.model, cache, state, cache.max_len, params, generator, stops)

            self._graph = DecodeGraph(key, self.model, cache, state, generator, step)
        self._graph.refresh(self.kv_scales)
        return self._graph

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


def _max_positions(model) -> int | None:
    """max_position_embeddings of the model's text config, where it is an int (past it RoPE extrapolates): an HF
    config's attribute, or the config.json our DecoderConfig came from (`hf`)."""
    config = getattr(model, "config", None)
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    limit = getattr(text, "max_position_embeddings", None)
    if limit is None and isinstance(getattr(text, "hf", None), Mapping):
        limit = text.hf.get("max_position_embeddings")
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None


def _capturable(model) -> bool:
    """Whether the decode step can be captured: an FP8 linear whose policy checks for NaN/Inf
    (`numerics.nonfinite: error|warn`) syncs with the host every call, so it decodes eagerly instead."""
    return all(m.numerics.nonfinite is NonFinite.PROPAGATE for m in model.modules() if isinstance(m, Fp8Linear))


def _static_shapes(device: torch.device) -> bool:
    """Whether decoding runs the graph-shaped step (whole-cache reads, rounded cache length): on the GPU."""
    return device.type == "cuda"


__all__ = ["Engine", "Rollout"]
