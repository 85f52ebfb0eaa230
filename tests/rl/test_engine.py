"""The rollout engine: determinism, greedy equal to transformers' generate, stopping rules, the Rollout layout."""

import pytest
import torch

from precision_engine.errors import UsageError
from precision_engine.models.decoder import Decoder
from precision_engine.models.loader import build_model
from precision_engine.rl.engine import Engine

PROMPTS = [[5, 17, 300, 2], [9], list(range(40, 60))]


@pytest.fixture(scope="module")
def model():
    return Decoder.from_config("tiny-llama", seed=1, dtype="bf16")


def test_same_seed_same_tokens_other_seed_other_tokens(model):
    engine = Engine(model)
    a = engine.generate(PROMPTS, n=2, max_new_tokens=12, seed=7)
    b = engine.generate(PROMPTS, n=2, max_new_tokens=12, seed=7)
    c = engine.generate(PROMPTS, n=2, max_new_tokens=12, seed=8)
    assert torch.equal(a.token_ids, b.token_ids) and torch.equal(a.logprobs, b.logprobs)
    assert not torch.equal(a.token_ids, c.token_ids)


def test_samples_of_a_group_differ_and_layout_is_prompt_then_response(model):
    r = Engine(model, pad_token_id=3).generate(PROMPTS, n=4, max_new_tokens=10, temperature=1.0, seed=0)
    n_rows = len(PROMPTS) * 4
    assert r.token_ids.shape[0] == n_rows and r.group.tolist() == [g for g in range(3) for _ in range(4)]
    responses = r.responses()
    for g in range(3):
        group = [tuple(responses[i]) for i in range(g * 4, g * 4 + 4)]
        assert len(set(group)) == 4  # four different samples
    for row in range(n_rows):
        p, length = int(r.prompt_lengths[row]), int(r.response_lengths[row])
        assert r.token_ids[row, :p].tolist() == PROMPTS[r.group[row]]
        assert r.generated_mask[row].nonzero().flatten().tolist() == list(range(p, p + length))
        assert torch.equal(r.attention_mask[row], torch.arange(r.token_ids.shape[1]) < p + length)
        assert (r.token_ids[row, p + length :] == 3).all()
        assert (r.logprobs[row][r.generated_mask[row]] < 0).all()
        assert (r.logprobs[row][~r.generated_mask[row]] == 0).all()
    assert r.token_ids.shape[1] == int((r.prompt_lengths + r.response_lengths).max())
    assert (r.response_lengths == 10).all() and not r.finished.any()


@pytest.mark.parametrize(
    "dtype,batch_invariant,seed", [("bf16", True, 3), ("fp32", True, 4), ("fp32", False, 4)]
)
def test_greedy_equals_transformers_generate(dtype, batch_invariant, seed):
    """Temperature 0 gives transformers' greedy tokens on the same weights (our prompts decoded together,
    ragged; HF's one at a time). BF16 is exact for this seed, but random tiny models have near-ties that BF16
    rounding can flip (seed 4 flips at token 11: our GEMMs round like HF's only up to the accumulation order),
    so fp32 is the tie-proof check."""
    hf = build_model("tiny-llama", device="cpu", dtype=dtype, seed=seed)
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = 0
    ours = Decoder.from_config("tiny-llama", dtype=dtype, batch_invariant=batch_invariant)
    ours.load_state_dict(hf.state_dict())
    rollout = Engine(ours).generate(PROMPTS, max_new_tokens=16, temperature=0)
    for prompt, response in zip(PROMPTS, rollout.responses()):
        expected = hf.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)[0, len(prompt) :]
        assert response == expected.tolist()


def _greedy(model, max_new_tokens=16):
    return Engine(model).generate(PROMPTS, max_new_tokens=max_new_tokens, temperature=0).responses()


def test_eos_ends_a_row_and_max_new_tokens_caps_the_rest(model):
    greedy = _greedy(model)
    eos = greedy[0][5]
    first = [resp.index(eos) + 1 if eos in resp else None for resp in greedy]
    r = Engine(model).generate(PROMPTS, max_new_tokens=16, temperature=0, eos_token_ids=[eos, 511])
    for row, stop in enumerate(first):
        expected = greedy[row][:stop] if stop else greedy[row]
        assert r.responses()[row] == expected
        assert bool(r.finished[row]) == (stop is not None)
    short = Engine(model).generate(PROMPTS, max_new_tokens=3, temperature=0)
    assert short.responses() == [g[:3] for g in greedy] and (short.response_lengths == 3).all()


def test_stop_sequences_end_rows_after_the_sequence(model):
    greedy = _greedy(model)
    stop = greedy[2][6:8]
    r = Engine(model).generate(PROMPTS, max_new_tokens=16, temperature=0, stop_sequences=[stop, [511, 511, 511]])
    for row, resp in enumerate(greedy):
        ends = [i + 2 for i in range(len(resp) - 1) if resp[i : i + 2] == stop]
        assert r.responses()[row] == (resp[: ends[0]] if ends else resp)
    assert bool(r.finished[2])


def test_engine_refuses_bad_requests(model):
    engine = Engine(model)
    with pytest.raises(UsageError):
        engine.generate([[]], max_new_tokens=4)
    with pytest.raises(UsageError):
        engine.generate(PROMPTS, max_new_tokens=0)
    with pytest.raises(UsageError):
        engine.generate(PROMPTS, max_new_tokens=4, top_p=0)
    with pytest.raises(UsageError):
        engine.generate(PROMPTS, max_new_tokens=4, stop_sequences=[[]])
    vocab = model.model.embed_tokens.num_embeddings
    for kwargs, words in (({"prompts": [[1, vocab]]}, f"prompt: token id {vocab} is outside"),
                          ({"prompts": [[-1, 2]]}, "prompt: token id -1")):
        with pytest.raises(UsageError, match=words):  # not the embedding's IndexError (a GPU's device assert)
            engine.generate(**{"prompts": PROMPTS, **kwargs}, max_new_tokens=4)
    with pytest.raises(UsageError, match="pad_token_id: token id -1"):
        Engine(model, pad_token_id=-1).generate(PROMPTS, max_new_tokens=4)


def test_engine_refuses_a_model_that_is_not_our_decoder():
    """A transformers model (`prepare`'s default loader) is named, with the loader to use, not an AttributeError."""
    from precision_engine.models.loader import load_model

    with pytest.raises(UsageError, match="got LlamaForCausalLM .*load_decoder"):
        Engine(load_model("tiny-llama"))


def test_pipeline_prepares_the_decoder_for_the_engine():
    """`pipeline.prepare(..., loader=load_decoder)`: our decoder, rewritten and with calibrated FP8 KV scales."""
    from precision_engine.models.decoder import load_decoder
    from precision_engine.numerics.linear import Fp8Linear
    from precision_engine.pipeline import prepare

    ready = prepare("jetrl_unified_kv", "tiny-llama", phase="rollout", loader=load_decoder)
    assert isinstance(ready.model, Decoder) and isinstance(ready.model.model.layers[1].self_attn.q_proj, Fp8Linear)
    assert ready.kv_scales is not None and (ready.kv_scales.k != 1).all()
    rollout = Engine(ready.model, kv_scales=ready.kv_scales).generate(PROMPTS, max_new_tokens=4)
    assert (rollout.response_lengths == 4).all()


def test_engine_cache_must_be_the_one_the_applied_policy_says():
    """An FP8-KV policy applied without its scales would decode with a BF16 cache, and scales under a BF16-KV
    policy with an FP8 one: both are refused before any token; `restore` drops the policy, and the check with it."""
    from precision_engine.models.decoder import load_decoder
    from precision_engine.pipeline import prepare
    from precision_engine.rewrite import applied_kv_cache, restore

    fp8_kv = prepare("jetrl_unified_kv", "tiny-llama", phase="rollout", loader=load_decoder)
    assert applied_kv_cache(fp8_kv.model).is_fp8
    with pytest.raises(UsageError, match="keeps the KV cache in float8_e4m3, but the engine has no kv_scales"):
        Engine(fp8_kv.model).generate(PROMPTS, max_new_tokens=2)
    bf16_kv = prepare("jetrl_unified", "tiny-llama", phase="rollout", loader=load_decoder)
    with pytest.raises(UsageError, match="so its KV cache would be FP8, but the model's policy keeps it in bf16"):
        Engine(bf16_kv.model, kv_scales=fp8_kv.kv_scales).generate(PROMPTS, max_new_tokens=2)
    restore(fp8_kv.model)
    assert applied_kv_cache(fp8_kv.model) is None
    assert (Engine(fp8_kv.model).generate(PROMPTS, max_new_tokens=2).response_lengths == 2).all()
