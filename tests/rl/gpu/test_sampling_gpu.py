"""rl.sampling.sample on the GPU, where greedy and untruncated sampling run the fused kernels.

- The recorded logprob is `invariant.log_softmax(logits, t)` at the token, bitwise (what `token_logprobs`
  computes), greedy (at t = 1), sampled, and truncated (top-k, the torch ops).
- The fused draw uses the uniforms the torch ops drew from the same generator (same shape, same offsets): its
  tokens equal the torch ops' argmax(logp - log(-log u)) wherever the two best scores are > 1e-4 apart.
- Under a CUDA graph with the generator registered (as rl.decode captures the step), replays equal eager calls
  from the same seed, and successive replays draw fresh numbers.
A few seconds on an H200.
"""

from __future__ import annotations

import pytest
import torch

from precision_engine.numerics import invariant
from precision_engine.rl.sampling import SamplingParams, sample

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

VOCAB = 128256


def _logits(rows=64, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(rows, VOCAB, generator=g, device="cuda") * 3).bfloat16()


def _picked(logp, tokens):
    return logp.gather(-1, tokens[:, None])[:, 0]


@pytest.mark.parametrize("params", [SamplingParams(0.0), SamplingParams(0.8), SamplingParams(1.0, top_k=50)],
                         ids=["greedy", "sampled", "top_k"])
def test_logprob_is_the_trainers_log_softmax_element(params):
    logits = _logits()
    tokens, logprobs = sample(logits, params, torch.Generator(device="cuda").manual_seed(1))
    logp = invariant.log_softmax(logits, 1.0 if params.greedy else params.temperature)
    assert torch.equal(logprobs.view(torch.int32), _picked(logp, tokens).view(torch.int32))
    if params.greedy:
        assert torch.equal(tokens, logits.argmax(-1))


def test_fused_draw_uses_the_torch_ops_uniforms():
    logits = _logits(seed=2)
    tokens, _ = sample(logits, SamplingParams(0.8), torch.Generator(device="cuda").manual_seed(3))
    u = torch.rand(logits.shape, generator=torch.Generator(device="cuda").manual_seed(3), device="cuda")
    score = invariant.log_softmax(logits, 0.8) - torch.log(-torch.log(u))
    top2 = score.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 1e-4
    assert clear.float().mean().item() > 0.95 and torch.equal(tokens[clear], score.argmax(-1)[clear])


def test_graph_replays_draw_as_eager_calls_from_the_same_seed():
    logits, params = _logits(seed=4), SamplingParams(0.8)
    gen = torch.Generator(device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile outside the capture
        sample(logits, params, gen)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(gen)
    with torch.cuda.graph(graph):
        out = sample(logits, params, gen)
    gen.manual_seed(5)
    replayed = []
    for _ in range(2):
        graph.replay()
        replayed.append(tuple(t.clone() for t in out))
    gen.manual_seed(5)
    for tokens, logprobs in replayed:
        eager_tokens, eager_logprobs = sample(logits, params, gen)
        assert torch.equal(tokens, eager_tokens) and torch.equal(logprobs, eager_logprobs)
    assert not torch.equal(replayed[0][0], replayed[1][0])
