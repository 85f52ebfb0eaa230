"""The trainer's chunked token logprobs (rl/logprobs.py) against the whole-batch log-softmax they replace.

- Forward: bit for bit the whole-batch `invariant.log_softmax` + gather (`_whole_batch`, the implementation before
  chunking), for batch sizes 1 / 3 / 8, no / left / right padding and an all-padding row, temperatures 0 / 1 /
  0.7, chunks that do and do not divide the rows; through the tiny Llama too, and through the Triton kernels
  (in the interpreter) that CUDA tensors take, where the gradient is bitwise the old one as well.
- Gradient (fp32 logits, random, never zeros): within 16 eps x |g| / t of autograd through `_whole_batch` and
  of float64, element by element. |d logp / dx| <= 1 / t, so this is a few ulps of the row's scale; it is not
  tighter because the fp32 logp itself is off by up to an ulp of log V (8 eps at V = 5000), which
  exp(logp) carries into the softmax: the old implementation sits ~7 eps from float64 too. Positions whose
  logprob is masked (padding, the last one) get exactly zero.
- Memory, counted by a dispatch mode that follows every tensor storage the ops allocate: no fp32 tensor holds
  more than chunk_rows x the padded vocabulary, and live memory never exceeds the logits' own gradient plus
  6 such chunks; the whole-batch implementation breaks both bounds (so the checks can fail).
"""

from __future__ import annotations

import math
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from precision_engine.errors import OperandError
from precision_engine.models.decoder import Decoder
from precision_engine.numerics import invariant
from precision_engine.rl.logprobs import picked_logprobs, token_logprobs
from precision_engine.rl.sampling import logprob_temperature

V = 5000
EPS = torch.finfo(torch.float32).eps
GRAD_ULPS = 16


def _whole_batch(model, input_ids, attention_mask=None, *, temperature=1.0):
    """`token_logprobs` before chunking: log_softmax over every row at once, then the gather."""
    out = model(input_ids, attention_mask)
    logits = getattr(out, "logits", out)
    n, length, vocab = logits.shape
    logp = invariant.log_softmax(logits[:, :-1].reshape(-1, vocab), logprob_temperature(temperature))
    picked = logp.gather(-1, input_ids[:, 1:].reshape(-1, 1)).view(n, length - 1)
    mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    picked = torch.where(mask[:, 1:] & mask[:, :-1], picked, 0.0)
    return torch.cat((picked.new_zeros(n, 1), picked), dim=1)


def _batch(n, length, padding, *, seed, dtype=torch.float32, vocab=V):
    """(logits [n, length, vocab] requiring grad, ids, attention mask): rows of 3..length tokens padded on
    `padding`'s side (None: no padding); with padding, the last row is all padding."""
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(n, length, vocab, generator=g) * 4).to(dtype).requires_grad_()
    ids = torch.randint(0, vocab, (n, length), generator=g)
    mask = torch.ones(n, length, dtype=torch.long)
    if padding is not None:
        lengths = torch.randint(3, length + 1, (n,), generator=g)
        lengths[-1] = 0 if n > 1 else lengths[-1]
        cols = torch.arange(length)
        mask = (cols < lengths[:, None] if padding == "right" else cols >= length - lengths[:, None]).long()
    return logits, ids, mask


def _fixed(logits):
    return lambda ids, mask: logits


@pytest.mark.parametrize("n", [1, 3, 8])
@pytest.mark.parametrize("padding", [None, "left", "right"])
@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
def test_forward_is_the_whole_batch_bitwise(n, padding, temperature):
    logits, ids, mask = _batch(n, 13, padding, seed=n, dtype=torch.bfloat16)
    ref = _whole_batch(_fixed(logits), ids, mask, temperature=temperature)
    for chunk_rows in (1, 7, 13, 64, 10_000):  # 13 divides the n x 13 rows, 7 and 64 do not
        got = token_logprobs(_fixed(logits), ids, mask, temperature=temperature, chunk_rows=chunk_rows)
        assert got.dtype == torch.float32 and got.shape == (n, 13)
        assert torch.equal(got, ref), chunk_rows
        with torch.no_grad():
            assert torch.equal(token_logprobs(_fixed(logits), ids, mask, temperature=temperature,
                                              chunk_rows=chunk_rows), ref)
    assert not ref[:, 0].any() and not ref[mask == 0].any()


def test_forward_through_the_decoder_and_an_hf_style_output():
    model = Decoder.from_config("tiny-llama", seed=0, dtype="bf16", batch_invariant=True)
    model.train()
    ids = torch.randint(0, model.config.vocab_size, (3, 11), generator=torch.Generator().manual_seed(1))
    cols = torch.arange(11)
    for mask in ((cols >= torch.tensor([[0], [4], [7]])).long(), (cols < torch.tensor([[11], [5], [2]])).long()):
        ref = _whole_batch(model, ids, mask, temperature=0.7)
        got = token_logprobs(model, ids, mask, temperature=0.7, chunk_rows=5)
        assert got.requires_grad and torch.equal(got, ref)

    class Output:
        def __init__(self, logits):
            self.logits = logits

    logits, ids, mask = _batch(2, 9, "left", seed=3)

    def hf(ids, mask):
        return Output(logits)

    assert torch.equal(token_logprobs(hf, ids, mask, chunk_rows=4), _whole_batch(hf, ids, mask))


def _float64_grad(logits, ids, mask, temperature, g):
    x64 = logits.detach().double().requires_grad_()
    logp = torch.log_softmax(x64[:, :-1] / logprob_temperature(temperature), -1).gather(-1, ids[:, 1:, None])[..., 0]
    logp = torch.where(mask[:, 1:].bool() & mask[:, :-1].bool(), logp, 0.0)
    return torch.autograd.grad(logp, x64, g[:, 1:].double())[0]


@pytest.mark.parametrize("padding", [None, "left", "right"])
@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
@pytest.mark.parametrize("confident", [False, True])
def test_gradient_matches_autograd_through_the_whole_batch_and_float64(padding, temperature, confident):
    logits, ids, mask = _batch(6, 17, padding, seed=int(temperature * 10) + confident)
    if confident:  # targets the logits favour: softmax near 1, onehot - softmax a near-cancellation
        ids[:, 1:] = logits.detach()[:, :-1].argmax(-1)
    g = torch.randn(6, 17, generator=torch.Generator().manual_seed(9))
    got = torch.autograd.grad(token_logprobs(_fixed(logits), ids, mask, temperature=temperature, chunk_rows=5),
                              logits, g)[0]
    old = torch.autograd.grad(_whole_batch(_fixed(logits), ids, mask, temperature=temperature), logits, g)[0]
    # |g| / t of the position each row of logits predicts from (0 where it predicts nothing), in float64
    scale = torch.cat((g[:, 1:], g.new_zeros(6, 1)), 1).double().abs()[..., None] / logprob_temperature(temperature)
    bound = GRAD_ULPS * EPS * scale
    for ref in (old.double(), _float64_grad(logits, ids, mask, temperature, g)):
        assert bool(((got.double() - ref).abs() <= bound).all())
    scored = torch.cat((mask[:, 1:].bool() & mask[:, :-1].bool(), torch.zeros(6, 1, dtype=torch.bool)), 1)
    assert not got[~scored].any()  # padding and last positions: exactly zero
    assert got[scored].abs().amax(-1).min() > 0


def test_triton_path_chunks_bitwise_forward_and_gradient(monkeypatch):
    """CUDA tensors take `triton_sampling.log_softmax` (one program per row and vocab chunk, each row's partials
    combined alone): here in the interpreter, with 256-wide chunks so a row spans several."""
    pytest.importorskip("triton")
    from precision_engine.numerics import triton_sampling

    monkeypatch.setattr(triton_sampling, "MAX_CHUNK", 256)
    monkeypatch.setattr(invariant, "log_softmax", triton_sampling.log_softmax)
    logits, ids, mask = _batch(3, 7, "left", seed=5, vocab=1000)
    g = torch.randn(3, 7, generator=torch.Generator().manual_seed(6))
    old = _whole_batch(_fixed(logits), ids, mask, temperature=0.7)
    got = token_logprobs(_fixed(logits), ids, mask, temperature=0.7, chunk_rows=4)
    assert torch.equal(got, old)
    # the kernels' own backward for a one-hot upstream gradient, term for term: bitwise
    assert torch.equal(torch.autograd.grad(got, logits, g)[0], torch.autograd.grad(old, logits, g)[0])


class _LiveMemory(TorchDispatchMode):
    """Follows every storage an op returns (until Python frees it): `peak` live bytes, and the largest fp32
    tensor any op produced. Storages that exist before are not counted."""

    def __init__(self, *existing):
        super().__init__()
        self.live = {t.untyped_storage()._cdata: 0 for t in existing}
        self.bytes = self.peak = self.largest_fp32 = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            if t.dtype == torch.float32:
                self.largest_fp32 = max(self.largest_fp32, t.numel())
            storage = t.untyped_storage()
            if storage._cdata not in self.live:
                self.live[storage._cdata] = storage.nbytes()
                self.bytes += storage.nbytes()
                self.peak = max(self.peak, self.bytes)
                weakref.finalize(storage, self._free, storage._cdata)
        return out

    def _free(self, key):
        self.bytes -= self.live.pop(key)


def test_memory_is_bounded_by_the_chunk():
    chunk_rows, n, length = 4, 4, 33
    logits, ids, mask = _batch(n, length, "right", seed=7, dtype=torch.bfloat16)
    g = torch.randn(n, length, generator=torch.Generator().manual_seed(8))
    padded_vocab = math.ceil(V / invariant.VOCAB_CHUNK) * invariant.VOCAB_CHUNK
    chunk = chunk_rows * padded_vocab
    logits_grad = logits.numel() * logits.element_size()
    bound = logits_grad + 6 * chunk * 4 + 65_536  # 64 KiB: the [n, length] results, ids and masks

    def measure(score):
        memory = _LiveMemory(logits, ids, mask, g)
        with memory:
            score().backward(g)
        logits.grad = None
        return memory

    lean = measure(lambda: token_logprobs(_fixed(logits), ids, mask, chunk_rows=chunk_rows))
    assert lean.largest_fp32 <= chunk and lean.peak <= bound
    whole = measure(lambda: _whole_batch(_fixed(logits), ids, mask))
    assert whole.largest_fp32 >= n * (length - 1) * V and whole.peak > 3 * bound


def test_chunk_rows_must_be_positive():
    with pytest.raises(OperandError, match="chunk_rows"):
        picked_logprobs(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), 1.0, chunk_rows=0)
