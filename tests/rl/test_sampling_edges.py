"""Edges of the sampler's and the engine's inputs: a zero uniform, tiny temperatures, top_k -1 and non-ints, an int
EOS id, tensor prompts, non-int counts, prompts past the model's positions. About 10 s on two shared cores."""

import numpy as np
import pytest
import torch

from precision_engine.errors import UsageError
from precision_engine.models.decoder import Decoder
from precision_engine.models.loader import resolve_config
from precision_engine.numerics import invariant, triton_sampling
from precision_engine.rl import sampling
from precision_engine.rl.engine import Engine
from precision_engine.rl.sampling import SamplingParams, sample

LOGITS = torch.tensor([[0.0, 1.0, 5.0, 2.0]])  # token 2 is the most likely
PROMPT = [5, 17, 300, 2]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the fused kernel: on the GPU, else Triton's interpreter


@pytest.fixture(scope="module")
def model():
    return Decoder.from_config("tiny-llama", seed=1, dtype="bf16")


@pytest.fixture
def rand_zero_at(monkeypatch):
    """torch.rand that gives exactly 0 (one draw in 2**24) at the given columns."""

    def patch(columns):
        real = torch.rand

        def rand(*args, **kwargs):
            u = real(*args, **kwargs)
            u[..., columns] = 0.0
            return u

        monkeypatch.setattr(torch, "rand", rand)

    return patch


@pytest.mark.parametrize("params", [SamplingParams(1.0, top_k=1), SamplingParams(1.0, top_p=0.5)],
                         ids=["top_k", "top_p"])
def test_a_zero_uniform_on_the_only_allowed_token_still_draws_it(rand_zero_at, params):
    """u = 0 made the allowed token's score -inf like every truncated one, and argmax took token 0."""
    rand_zero_at([2])
    tokens, logprobs = sample(LOGITS, params, torch.Generator().manual_seed(0))
    assert tokens.tolist() == [2]
    assert torch.equal(logprobs, invariant.log_softmax(LOGITS)[:, 2])


def test_the_torch_and_fused_paths_read_the_same_clamped_uniforms(rand_zero_at, monkeypatch):
    """Every uniform 0: clamped, the noise is equal everywhere and both paths take the argmax of the logits;
    unclamped, every torch score was -inf and argmax took token 0."""
    rand_zero_at(slice(None))
    logits = LOGITS.to(DEVICE)
    u = sampling._uniform(logits.shape, None, logits.device)
    assert (u == torch.finfo(torch.float32).tiny).all()
    fused_tokens, fused_logprobs = triton_sampling.sample(logits, 1.0, u)
    monkeypatch.setattr(sampling, "_fused_sampler", lambda: None)  # the torch ops, on a GPU too
    torch_tokens, torch_logprobs = sample(logits, SamplingParams(1.0), None)
    assert torch_tokens.tolist() == fused_tokens.tolist() == [2]
    assert torch.isfinite(torch_logprobs).all() and torch.isfinite(fused_logprobs).all()


@pytest.mark.parametrize("temperature", [1e-40, 1e-6, 9.99e-6])
def test_a_tiny_positive_temperature_is_refused_with_the_greedy_hint(model, temperature):
    """logits / 1e-40 overflows (token 0, NaN logprobs); greedy would record logprobs at another temperature."""
    with pytest.raises(UsageError, match=f"temperature must be 0 \\(greedy\\) or >= 1e-05, got {temperature}"):
        SamplingParams(temperature)
    with pytest.raises(UsageError, match="temperature=0 for greedy"):
        Engine(model).generate([PROMPT], max_new_tokens=2, temperature=temperature)
    assert SamplingParams(1e-5).temperature == 1e-5 and SamplingParams(0.0).greedy


def test_top_k_minus_one_is_off_like_zero(model):
    """-1 is off in verl, vLLM and SGLang; stored as 0, it keys the same captured decode graph."""
    off = SamplingParams(1.0, top_k=-1)
    assert off == SamplingParams(1.0, top_k=0) and hash(off) == hash(SamplingParams(1.0)) and off.top_k == 0
    logits = torch.randn(8, 50, generator=torch.Generator().manual_seed(1))
    draws = [sample(logits, SamplingParams(1.0, top_k=k), torch.Generator().manual_seed(2)) for k in (-1, 0)]
    assert all(torch.equal(a, b) for a, b in zip(*draws))
    rollouts = [Engine(model).generate([PROMPT], n=2, max_new_tokens=3, top_k=k, seed=4) for k in (-1, 0)]
    assert torch.equal(rollouts[0].token_ids, rollouts[1].token_ids)
    assert SamplingParams(1.0, top_k=np.int64(3)).top_k == 3 and type(SamplingParams(top_k=np.int64(3)).top_k) is int


@pytest.mark.parametrize("top_k", [-2, 2.5, 2.0, True, "3", None])
def test_top_k_other_than_an_int_of_at_least_minus_one_is_refused(top_k):
    with pytest.raises(UsageError, match=f"top_k must be an int >= 1, or 0 or -1 for off, got {top_k!r}"):
        SamplingParams(1.0, top_k=top_k)


def test_an_int_eos_token_id_is_one_id(model):
    engine = Engine(model)
    eos = engine.generate([PROMPT], max_new_tokens=6, temperature=0).responses()[0][2]
    one = engine.generate([PROMPT], max_new_tokens=6, temperature=0, eos_token_ids=eos)
    listed = engine.generate([PROMPT], max_new_tokens=6, temperature=0, eos_token_ids=[eos])
    assert one.responses() == listed.responses() and bool(one.finished[0])


def test_no_eos_is_none_or_empty_and_text_prompts_and_bad_seeds_are_usage_errors(model):
    engine = Engine(model)
    none = engine.generate([PROMPT], max_new_tokens=3, temperature=0, eos_token_ids=None)
    assert none.responses() == engine.generate([PROMPT], max_new_tokens=3, temperature=0).responses()
    for prompts in ("12+3=", ["12+3="]):
        with pytest.raises(UsageError, match="prompts must be token ids, not text"):
            engine.generate(prompts, max_new_tokens=2)
    for seed in (-1, 2**64, 1.5, True):
        with pytest.raises(UsageError, match=r"seed must be an int in \[0, 2\*\*64\)"):
            engine.generate([PROMPT], max_new_tokens=2, seed=seed)
    engine.generate([PROMPT], max_new_tokens=2, seed=2**64 - 1)


def test_a_tensor_of_prompts_is_refused_and_a_list_of_1d_tensors_is_taken(model):
    engine = Engine(model)
    with pytest.raises(UsageError, match=r"prompts must be a list of token-id lists .* shape \(2, 4\)"):
        engine.generate(torch.tensor([PROMPT, PROMPT]), max_new_tokens=2)
    as_tensors = engine.generate([torch.tensor(PROMPT)], max_new_tokens=3, temperature=0)
    assert as_tensors.responses() == engine.generate([PROMPT], max_new_tokens=3, temperature=0).responses()


@pytest.mark.parametrize("kwargs,words", [({"n": 1.5}, "n must be an int >= 1, got 1.5"),
                                          ({"n": 2.0}, "n must be an int >= 1, got 2.0"),
                                          ({"n": True}, "n must be an int >= 1, got True"),
                                          ({"max_new_tokens": 2.5}, "max_new_tokens must be an int >= 1, got 2.5")])
def test_non_int_counts_are_refused(model, kwargs, words):
    with pytest.raises(UsageError, match=words):
        Engine(model).generate([PROMPT], **{"max_new_tokens": 2, **kwargs})


def test_prompt_and_new_tokens_past_max_position_embeddings_are_refused_before_any_forward(model, monkeypatch):
    """tiny-llama takes 2048 positions: a 2,500-token prompt is refused before the prefill."""
    monkeypatch.setattr(model, "forward_cached", lambda *args, **kwargs: pytest.fail("a forward ran"))
    with pytest.raises(UsageError, match=r"\(2500 tokens\) plus max_new_tokens=2 is 2502 positions, the model "
                                         r"takes at most 2048 \(max_position_embeddings"):
        Engine(model).generate([[9], [7] * 2500], max_new_tokens=2)


@pytest.mark.parametrize("limit", [16, None])
def test_the_limit_is_the_configs_max_position_embeddings_where_it_has_one(limit):
    """prompt + max_new_tokens may reach the limit, not pass it; a config without one sets none."""
    config = resolve_config("tiny-llama")
    del config["max_position_embeddings"]
    if limit is not None:
        config["max_position_embeddings"] = limit
    engine = Engine(Decoder.from_config(config, seed=1, dtype="bf16"))
    assert (engine.generate([[7] * 15], max_new_tokens=1).response_lengths == 1).all()
    if limit is None:
        assert (engine.generate([[7] * 15], max_new_tokens=2).response_lengths == 2).all()
    else:
        with pytest.raises(UsageError, match="is 17 positions, the model takes at most 16"):
            engine.generate([[7] * 15], max_new_tokens=2)
