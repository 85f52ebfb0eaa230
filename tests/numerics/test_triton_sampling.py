"""The chunked log-softmax and the fused sampler (numerics/triton_sampling.py) in Triton's CPU interpreter.

What is measured, on V = 1000 / 2100 cut into 256-wide chunks (4 / 9 a row, the last one partial; and V = 5000
in the default two 4096-wide chunks), rows 1 / 3 / 8:
- log_softmax: equal to its torch twin bit for bit (with the interpreter's exp and log, numpy's, in the twin:
  torch's own differ from numpy's in the last bit of ~40% of floats, and the twin is about the order of the
  additions); within 1e-5 absolute of float64 (fp32 logprobs of |logit / t| <= ~25); -inf logits give -inf,
  never NaN; a row's bits are the same alone, in a batch, shuffled.
- sample: the logprob is the log_softmax element at the token, bitwise; the token is the argmax of
  log_softmax + Gumbel noise computed in torch from the same uniforms (every row's best score leads the next
  by > 1e-3, so no rounding could reorder them) and equals the twin's; a row's token and logprob do not depend
  on the rows beside it; greedy is torch.argmax (lowest index on ties, across chunks too) with the logprob at t.
The whole file takes ~10 s on one core, ~3 s of it compiling the kernels for sm_90 (no GPU needed).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from precision_engine.numerics import triton_sampling as TS  # noqa: E402

from helpers import run_offline_compile  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROWS = (1, 3, 8)
VOCABS = (1000, 2100)  # 4 chunks; 8 and a 52-column tail


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """256-wide chunks, so a small vocabulary spans many (the default, 4096, is exercised once below)."""
    monkeypatch.setattr(TS, "MAX_CHUNK", 256)


def _bits(t):
    return t.contiguous().view(torch.int32)


def _logits(rows, v, *, seed, scale=4.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, v, generator=g) * scale).bfloat16().to(DEVICE)


def _uniform(rows, v, *, seed):
    return torch.rand(rows, v, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


@contextmanager
def _interpreter_transcendentals():
    """torch.exp / torch.log as the interpreter computes tl.exp / tl.log (numpy, fp32)."""
    exp, log = torch.exp, torch.log

    def wrap(fn):
        return lambda t: torch.from_numpy(fn(t.contiguous().numpy()))

    torch.exp, torch.log = wrap(np.exp), wrap(np.log)
    try:
        yield
    finally:
        torch.exp, torch.log = exp, log


def _twin(fn, *args):
    if DEVICE != "cpu":  # on a GPU the kernels' exp and log are the device's: compare structure in the interpreter
        pytest.skip("bitwise twin comparison runs in the interpreter")
    with _interpreter_transcendentals():
        return fn(*args)


def test_chunk_is_a_function_of_the_vocabulary_only():
    assert TS.vocab_chunk(5000) == 256 and TS.vocab_chunk(200) == 256 and TS.vocab_chunk(7) == 8


@pytest.mark.parametrize("v", VOCABS)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_softmax_equals_twin_bitwise_and_float64(v, temperature):
    logits = _logits(3, v, seed=v)
    logits[2, 300:600] = float("-inf")  # a masked vocabulary slice spanning whole chunks
    out = TS.log_softmax(logits, temperature)
    ref = torch.log_softmax(logits.double() / temperature, -1)
    assert out.dtype == torch.float32 and not torch.isnan(out).any()
    assert torch.equal(torch.isinf(out), torch.isinf(ref))
    finite = torch.isfinite(ref)
    assert (out.double() - ref)[finite].abs().max().item() < 1e-5
    assert torch.equal(_bits(out), _bits(_twin(TS.log_softmax_twin, logits, temperature)))


def test_log_softmax_with_the_default_chunk(monkeypatch):
    monkeypatch.setattr(TS, "MAX_CHUNK", 4096)
    logits = _logits(3, 5000, seed=3)  # two 4096-wide chunks
    out = TS.log_softmax(logits, 0.9)
    assert torch.equal(_bits(out), _bits(_twin(TS.log_softmax_twin, logits, 0.9)))
    assert (out.double() - torch.log_softmax(logits.double() / 0.9, -1)).abs().max().item() < 1e-5


def test_log_softmax_rows_bitwise_batch_invariant():
    logits = _logits(8, 1000, seed=4, scale=3.0)
    full = TS.log_softmax(logits, 0.9)
    for m in ROWS[:-1]:
        assert torch.equal(_bits(TS.log_softmax(logits[:m], 0.9)), _bits(full[:m])), m
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(2))
    assert torch.equal(_bits(TS.log_softmax(logits[perm], 0.9)), _bits(full[perm]))


@pytest.mark.parametrize("v,temperature", [(1000, 1.0), (VOCABS[1], 0.7), (1000, 1.3)])
def test_sample_records_the_log_softmax_element_and_draws_its_gumbel_argmax(v, temperature):
    logits, u = _logits(8, v, seed=v, scale=2.0), _uniform(8, v, seed=1)
    tokens, logprobs = TS.sample(logits, temperature, u)
    logp = TS.log_softmax(logits, temperature)
    assert tokens.dtype == torch.long and logprobs.dtype == torch.float32
    assert torch.equal(_bits(logprobs), _bits(logp.gather(-1, tokens[:, None])[:, 0]))
    score = logp - torch.log(-torch.log(u))
    top2 = score.topk(2, dim=-1).values
    assert ((top2[:, 0] - top2[:, 1]) > 1e-3).all()  # no near-tie: rounding cannot decide these draws
    assert torch.equal(tokens, score.argmax(-1))
    twin_tokens, twin_logprobs = _twin(TS.sample_twin, logits, temperature, u)
    assert torch.equal(tokens, twin_tokens) and torch.equal(_bits(logprobs), _bits(twin_logprobs))


def test_sample_rows_do_not_depend_on_the_batch():
    logits, u = _logits(8, 1000, seed=5, scale=2.0), _uniform(8, 1000, seed=6)
    tokens, logprobs = TS.sample(logits, 0.8, u)
    for rows in (slice(0, 1), slice(0, 3), slice(5, 6)):
        t, lp = TS.sample(logits[rows], 0.8, u[rows])
        assert torch.equal(t, tokens[rows]) and torch.equal(_bits(lp), _bits(logprobs[rows])), rows


def test_sample_never_draws_a_masked_token():
    logits, u = _logits(3, 1000, seed=7, scale=0.1), _uniform(3, 1000, seed=8)
    logits[:, 500:] = float("-inf")
    u[:, 500:] = 1 - 2 ** -24  # the largest uniform torch.rand gives: the largest noise
    tokens, logprobs = TS.sample(logits, 1.0, u)
    assert (tokens < 500).all() and torch.isfinite(logprobs).all()


def test_greedy_is_torch_argmax_lowest_index_on_ties():
    logits = _logits(3, 2100, seed=9, scale=2.0)
    logits[0, [700, 2000]] = 30.0  # a tie across chunks: the lower column
    logits[1, [1030, 1031]] = 30.0  # a tie inside one chunk
    tokens, logprobs = TS.sample(logits, 1.0)
    assert tokens.tolist()[:2] == [700, 1030] and torch.equal(tokens, logits.argmax(-1))
    assert torch.equal(_bits(logprobs), _bits(TS.log_softmax(logits, 1.0).gather(-1, tokens[:, None])[:, 0]))


def test_bad_arguments():
    logits = _logits(2, 300, seed=10)
    with pytest.raises(ValueError, match="temperature"):
        TS.log_softmax(logits, 0.0)
    with pytest.raises(ValueError, match="uniform"):
        TS.sample(logits, 1.0, torch.rand(2, 299, device=DEVICE))


_COMPILE_FOR_SM90 = r'''
import re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from precision_engine.numerics import triton_sampling as TS

def compile_(fn, types, constexprs, **opts):
    sig = dict(zip(fn.arg_names, types + ["constexpr"] * len(constexprs)))
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(types) if t.startswith("*")}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(opts, **TS.FUSION)).asm["ptx"]

ptxs = [compile_(TS._chunk_kernel, ["*bf16", "*fp32", "*fp32", "*fp32", "*fp32", "*i32"] + ["i32"] * 4 + ["fp32"],
                 dict(CHUNK=4096, MODE=mode), num_warps=8) for mode in (0, 1, 2)]
ptxs.append(compile_(TS._write_kernel, ["*bf16", "*fp32", "*fp32", "*fp32"] + ["i32"] * 4 + ["fp32"],
                     dict(CHUNK=4096, NC_P2=32), num_warps=8))
ptxs.append(compile_(TS._pick_kernel, ["*bf16", "*fp32", "*fp32", "*fp32", "*i32", "*i64", "*fp32"] + ["i32"] * 3
                     + ["fp32"], dict(NC_P2=32), num_warps=1))
for ptx in ptxs:  # every fp32 add / sub / mul carries its rounding: nothing left for ptxas to contract
    assert not re.search(r"\b(add|sub|mul)\.f32", ptx) and "add.rn.f32" in ptx
print("ok")
'''


def test_kernels_compile_for_hopper_without_contraction():
    """Ahead-of-time compilation for sm_90 with this machine's Triton (no GPU needed; ~3 s)."""
    run_offline_compile(_COMPILE_FOR_SM90)
