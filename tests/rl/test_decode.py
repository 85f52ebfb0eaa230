"""The decode step the GPU captures in a CUDA graph, run eagerly on the CPU: the static shapes it uses (whole-cache
reads, a cache rounded up to DECODE_LEN_MULTIPLE, the host's done-check every SYNC_EVERY steps) change no token
and no logprob bit against the CPU's own loop, and the device-side stop checks end rows where they should.
About 5 s on one shared core."""

import torch

from precision_engine.models.decoder import Decoder
from precision_engine.rl import engine as engine_module
from precision_engine.rl.decode import DecodeState, StopCheck
from precision_engine.rl.engine import Engine

PROMPTS = [[5, 17, 300, 2], [9], list(range(40, 60))]


def test_static_graph_shaped_step_equals_the_cpu_loop(monkeypatch):
    model = Decoder.from_config("tiny-llama", seed=2, dtype="bf16", batch_invariant=True)
    kwargs = dict(n=2, max_new_tokens=10, temperature=0.9, seed=3)
    reference = Engine(model).generate(PROMPTS, **kwargs)
    eos = reference.responses()[1][4]
    stopped = Engine(model).generate(PROMPTS, eos_token_ids=[eos], **kwargs)
    monkeypatch.setattr(engine_module, "_static_shapes", lambda device: True)
    engine = Engine(model, cuda_graphs=False)
    for expected, extra in ((reference, {}), (stopped, {"eos_token_ids": [eos]})):
        static = engine.generate(PROMPTS, **kwargs, **extra)
        assert torch.equal(static.token_ids, expected.token_ids)
        assert torch.equal(static.logprobs, expected.logprobs)
        assert torch.equal(static.response_lengths, expected.response_lengths)
        assert torch.equal(static.finished, expected.finished)
    assert bool(stopped.finished[1]) and int(stopped.response_lengths[1]) == 5


def test_stop_check_reads_the_step_from_the_device():
    tokens = torch.tensor([[1, 2, 3, 0], [3, 2, 3, 0], [7, 7, 7, 0]])
    check = StopCheck([7], [[2, 3], [1, 2, 3, 9]], "cpu")
    assert check(tokens, torch.tensor(0)).tolist() == [False, False, True]
    assert check(tokens, torch.tensor(2)).tolist() == [True, True, True]
    assert check(tokens, torch.tensor(1)).tolist() == [False, False, True]  # [1, 2] is no stop sequence
    none = StopCheck([], [], "cpu")
    assert not none(tokens, torch.tensor(2)).any()


def test_decode_state_records_in_place_and_keeps_the_first_stop():
    state = DecodeState(2, 3, pad_token_id=0, device="cpu")
    buffers = [state.tokens, state.logprobs, state.finished, state.response_len, state.step]
    state.reset(torch.tensor([4, 2]))
    logits = torch.zeros(2, 5)
    logits[0, 4] = logits[1, 1] = 3.0  # greedy: token 4 for row 0, token 1 for row 1
    stops = StopCheck([4], [], "cpu")
    params = engine_module.SamplingParams(temperature=0)
    for _ in range(3):
        state.record(logits, params, None, stops)
    assert state.tokens.tolist() == [[4, 4, 4], [1, 1, 1]]
    assert state.response_len.tolist() == [1, 3] and state.finished.tolist() == [True, False]
    assert int(state.step) == 3 and (state.logprobs < 0).all()
    assert all(a is b for a, b in zip(buffers, [state.tokens, state.logprobs, state.finished, state.response_len,
                                                  state.step]))
