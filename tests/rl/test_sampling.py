"""The sampler: exact distribution (Gumbel-max), truncation, greedy, and the recorded logprob."""

import math

import pytest
import torch

from precision_engine.errors import UsageError
from precision_engine.numerics import invariant
from precision_engine.rl.sampling import SamplingParams, logprob_temperature, sample

LOGITS = torch.tensor([2.0, 1.0, 0.5, -1.0, 0.0])
ROWS = 40_000


def _draw(params: SamplingParams, seed: int = 0):
    logits = LOGITS.expand(ROWS, -1).bfloat16()
    return sample(logits, params, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_frequencies_follow_the_temperature_scaled_softmax(temperature):
    tokens, logprobs = _draw(SamplingParams(temperature))
    expected = torch.softmax(LOGITS.double() / temperature, -1)
    freq = torch.bincount(tokens, minlength=5).double() / ROWS
    assert float((freq - expected).abs().max()) < 4 * math.sqrt(0.25 / ROWS)  # 4 sigma
    full = invariant.log_softmax(LOGITS.bfloat16()[None], temperature)[0]
    assert torch.equal(logprobs, full[tokens])  # the full distribution's logprob, bitwise


def test_top_k_and_top_p_truncate_sampling_but_not_the_logprob():
    tokens, logprobs = _draw(SamplingParams(1.0, top_k=2))
    assert set(tokens.tolist()) == {0, 1}
    p = torch.softmax(LOGITS.double(), -1)
    freq0 = float((tokens == 0).double().mean())
    assert abs(freq0 - p[0] / (p[0] + p[1])) < 0.01
    assert torch.equal(logprobs, invariant.log_softmax(LOGITS.bfloat16()[None])[0][tokens])  # untruncated
    # p = .563, .207, .126, .076, .028: the smallest set reaching top_p is kept
    tokens, _ = _draw(SamplingParams(1.0, top_p=0.7))
    assert set(tokens.tolist()) == {0, 1}
    tokens, _ = _draw(SamplingParams(1.0, top_p=0.8))
    assert set(tokens.tolist()) == {0, 1, 2}
    tokens, _ = _draw(SamplingParams(1.0, top_p=0.01))  # the most likely token is always kept
    assert set(tokens.tolist()) == {0}


def test_greedy_is_argmax_with_logprob_at_temperature_one():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(1)).bfloat16()
    tokens, logprobs = sample(logits, SamplingParams(0.0), None)
    assert torch.equal(tokens, logits.argmax(-1))
    assert logprob_temperature(0.0) == 1.0
    assert torch.equal(logprobs, invariant.log_softmax(logits).gather(-1, tokens[:, None])[:, 0])


def test_same_generator_seed_same_draws():
    a, _ = _draw(SamplingParams(1.0), seed=3)
    b, _ = _draw(SamplingParams(1.0), seed=3)
    c, _ = _draw(SamplingParams(1.0), seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("kwargs", [{"temperature": -1.0}, {"temperature": math.inf}, {"top_p": 0.0},
                                    {"top_p": 1.5}, {"top_k": -2}])
def test_bad_parameters_are_usage_errors(kwargs):
    with pytest.raises(UsageError):
        SamplingParams(**kwargs)
