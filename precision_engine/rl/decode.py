"""The decode loop's device state and step, run eagerly or replayed from one CUDA graph.

Every update is in place on preallocated buffers and the index of the next token lives on the device, so the
step the engine runs eagerly (on the CPU, and as the reference on the GPU) is the very code a CUDA graph
captures: `decode_step` = one forward of the last sampled tokens against the KV cache, one sample, the record
of token and logprob at the step's column, the stop checks, all without a host sync.

`DecodeGraph` captures `decode_step` once for a fixed key (rows, max_new_tokens, sampling, stops, formats) and
keeps its own KV cache and state, so later `generate` calls with the same key whose prompts fit that cache
replay it. What a graph reads
by address must stay where it was at capture: the model's parameters (checked: a moved or replaced parameter,
or a module swapped by a rewrite, means a new capture), FP8 weights re-quantized after a weight update (their
new bytes are copied into the buffers the graph reads, once per weight version: `refresh`), and the KV scales
(copied into the graph's cache). The sampler's `torch.Generator` is registered with the graph
(`CUDAGraph.register_generator_state`): a replay draws from the generator's current (seed, offset) and
advances it as the eager step would, so replayed and eager decoding draw the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from precision_engine.numerics.linear import Fp8Linear
from precision_engine.rl.sampling import SamplingParams, sample

WARMUP_STEPS = 2  # eager steps on the capture stream before capture: Triton compiles, the RoPE table grows


class StopCheck:
    """Which rows the token just written at `step` (a 0-dim device tensor) ends: an EOS id, or the tail of a stop
    sequence. Fixed shapes, no host sync."""

    def __init__(self, eos_token_ids: Sequence[int], stop_sequences: Sequence[Sequence[int]], device) -> None:
        self.eos = torch.tensor(list(eos_token_ids), dtype=torch.long, device=device)
        self.sequences = [torch.tensor(list(s), dtype=torch.long, device=device) for s in stop_sequences]
        self.offsets = [torch.arange(1 - len(s), 1, device=device) for s in stop_sequences]

    def __call__(self, tokens: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        rows = tokens.shape[0]
        token = tokens.gather(1, step.expand(rows, 1))
        hit = (token == self.eos).any(-1)
        for seq, offsets in zip(self.sequences, self.offsets):
            window = tokens.index_select(1, (step + offsets).clamp(min=0))  # [rows, len(seq)]
            hit |= (window == seq).all(-1) & (step + 1 >= len(seq))
        return hit


class DecodeState:
    """Buffers of one decode: rows sample max_new_tokens tokens each; row b's token s sits at position
    start[b] + s. Every method updates in place (a CUDA graph owns these addresses)."""

    def __init__(self, rows: int, max_new_tokens: int, *, pad_token_id: int, device) -> None:
        self.pad_token_id = pad_token_id
        self.tokens = torch.full((rows, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
        self.logprobs = torch.zeros((rows, max_new_tokens), dtype=torch.float32, device=device)
        self.finished = torch.zeros(rows, dtype=torch.bool, device=device)
        self.response_len = torch.full((rows,), max_new_tokens, dtype=torch.long, device=device)
        self.start = torch.zeros(rows, dtype=torch.long, device=device)
        self.last = torch.zeros(rows, dtype=torch.long, device=device)  # the last sampled token of each row
        self.step = torch.zeros((), dtype=torch.long, device=device)  # the index of the next token to sample

    def reset(self, start: torch.Tensor) -> None:
        """A new decode of rows whose first generated token sits at position `start` [rows]."""
        self.tokens.fill_(self.pad_token_id)
        self.logprobs.zero_()
        self.finished.zero_()
        self.response_len.fill_(self.tokens.shape[1])
        self.start.copy_(start)
        self.last.zero_()
        self.step.zero_()

    def record(self, logits: torch.Tensor, params: SamplingParams, generator, stops: StopCheck) -> None:
        """Sample token `step` of every row from logits [rows, V], record it, its logprob and whether it ends
        the row, and advance `step`."""
        token, logprob = sample(logits, params, generator)
        at = self.step.expand(len(token), 1)
        self.tokens.scatter_(1, at, token[:, None])
        self.logprobs.scatter_(1, at, logprob[:, None])
        hit = stops(self.tokens, self.step) & ~self.finished
        self.response_len.copy_(torch.where(hit, self.step + 1, self.response_len))
        self.finished |= hit
        self.last.copy_(token)
        self.step.add_(1)


def decode_step(model, cache, state: DecodeState, read_len: int, params: SamplingParams, generator,
                stops: StopCheck) -> None:
    """Feed each row's last token (at position start + step - 1) through `model` against `cache`, sample the next."""
    pos = state.start + state.step - 1
    logits = model.forward_cached(state.last[:, None], pos[:, None], pos + 1, cache, read_len=read_len)[:, 0]
    state.record(logits, params, generator, stops)


class DecodeGraph:
    """`step()` bound to its model, cache and state, captured in one CUDA graph; `replay()` runs one step."""

    def __init__(self, key: tuple, model, cache, state: DecodeState, generator: torch.Generator,
                 step: Callable[[], None]) -> None:
        self.key, self.model, self.cache, self.state = key, model, cache, state
        device = state.tokens.device
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_STEPS):
                state.step.fill_(1)  # a valid column whatever max_new_tokens is (the state is reset before use)
                step()
        torch.cuda.current_stream(device).wait_stream(stream)
        state.step.fill_(1)
        self.graph = torch.cuda.CUDAGraph()
        self.graph.register_generator_state(generator)
        with torch.cuda.graph(self.graph, stream=stream):
            step()
        self._fingerprint = _fingerprint(model)
        # (module, the Q(W) the graph reads, the module's Q(W) those bytes came from)
        self._fp8 = [[m, m.quantized_weight(), m.quantized_weight()] for m in model.modules()
                     if isinstance(m, Fp8Linear)]

    def matches(self, key: tuple) -> bool:
        """Same key, and every parameter and module where it was at capture."""
        return key == self.key and _fingerprint(self.model) == self._fingerprint

    @torch.no_grad()
    def refresh(self, kv_scales) -> None:
        """Bring what the graph reads by address up to date: FP8 weights of a new version, the KV scales."""
        for entry in self._fp8:
            module, captured, source = entry
            current = module.quantized_weight()  # quantizes once per weight version, outside the graph
            if current is not source:
                captured.data.copy_(current.data)
                captured.scale.copy_(current.scale)
                entry[2] = current
        if kv_scales is not None:
            self.cache.load_scales(kv_scales)

    def replay(self) -> None:
        self.graph.replay()


def _fingerprint(model) -> tuple:
    return tuple(p.data_ptr() for p in model.parameters()) + tuple(id(m) for m in model.modules())


__all__ = ["DecodeGraph", "DecodeState", "StopCheck", "decode_step"]
