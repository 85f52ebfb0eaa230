"""Batch-invariant ops: accuracy against float64 references, and a row's bits independent of its batch.

Invariance is checked bitwise (torch.equal on the raw values): a row computed alone, at every offset inside a
GEMM tile, inside batches of many sizes, and with padding around it.
"""

import math

import pytest
import torch

from precision_engine.numerics import invariant
from precision_engine.numerics.kv_cache import dequantize_kv, quantize_kv

DTYPES = [torch.float32, torch.bfloat16]
# fp32 results are checked at a few ulps of the fp32 accumulation; bf16 results at one bf16 rounding.
TOL = {torch.float32: 2e-5, torch.bfloat16: 1e-2}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,n", [(256, 512), (128, 384), (64, 32), (320, 200)])
def test_linear_accuracy_and_row_invariance(dtype, k, n):
    g = _gen(k + n)
    w = torch.randn(n, k, generator=g).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype)
    x = torch.randn(53, k, generator=g).to(dtype)
    full = invariant.linear(x, w, bias)
    assert full.dtype == dtype
    ref = x.double() @ w.double().T + bias.double()
    assert _rel_err(full, ref) < TOL[dtype]
    for m in (1, 2, 3, 8, 16, 17, 40):  # batch sizes, i.e. row positions inside a 16-row tile
        assert torch.equal(invariant.linear(x[:m], w, bias), full[:m])
    for i in range(x.shape[0]):  # each row alone, and at offset 5 of a batch of other rows
        assert torch.equal(invariant.linear(x[i : i + 1], w, bias), full[i : i + 1])
        others = torch.randn(7, k, generator=g).to(dtype)
        others[5] = x[i]
        assert torch.equal(invariant.linear(others, w, bias)[5], full[i])
    assert torch.equal(invariant.linear(x.view(1, 53, k), w, bias)[0], full)  # leading dims are flattened


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", [64, 256, 4096])
def test_rms_norm_accuracy_and_row_invariance(dtype, h):
    g = _gen(h)
    x = (torch.randn(37, h, generator=g) * 3).to(dtype)
    w = (1 + 0.1 * torch.randn(h, generator=g)).to(dtype)
    full = invariant.rms_norm(x, w, 1e-6)
    x64 = x.double()
    ref = w.double() * (x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6))
    assert _rel_err(full, ref) < TOL[dtype]
    for m in (1, 2, 5, 16, 37):
        assert torch.equal(invariant.rms_norm(x[-m:], w, 1e-6), full[-m:])
    assert torch.equal(invariant.rms_norm(x.view(37, 1, h), w, 1e-6)[:, 0], full)


@pytest.mark.parametrize("vocab", [17, 512, 1000, 5000])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_softmax_accuracy_and_row_invariance(vocab, temperature):
    g = _gen(vocab)
    logits = (torch.randn(29, vocab, generator=g) * 4).to(torch.bfloat16)
    full = invariant.log_softmax(logits, temperature)
    assert full.dtype == torch.float32
    ref = torch.log_softmax(logits.double() / temperature, dim=-1)
    assert float((full.double() - ref).abs().max()) < 1e-5
    for m in (1, 3, 8, 29):
        assert torch.equal(invariant.log_softmax(logits[:m], temperature), full[:m])
    assert invariant.log_softmax(logits[:0], temperature).shape == (0, vocab)
    stacked = logits.view(29, 1, vocab).expand(29, 3, vocab).reshape(87, vocab)  # repeated rows, other offsets
    assert torch.equal(invariant.log_softmax(stacked, temperature).view(29, 3, vocab)[:, 2], full)


def test_silu_is_position_independent_and_accurate():
    x = torch.randn(300_001, generator=_gen(3)) * 6
    y = invariant.silu(x)
    assert torch.equal(invariant.silu(x[1::3]), y[1::3])  # strided: the scalar path of every elementwise op
    ref = x.double() * torch.sigmoid(x.double())
    assert float(((y.double() - ref).abs() / ref.abs().clamp(min=1e-30)).max()) < 1e-6


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_the_kv_rounding_compile_with_the_eager_gradients(dtype):
    """torch.compile of the custom autograd Functions gives eager's gradients bitwise, in fp32 too, where their
    output cast is a no-op: torch 2.11 (the H200 image's) zeroed every compiled gradient through a no-op `.to()`
    output (`contract.as_dtype`); this test failed there on `invariant._Silu` in fp32 before it. ~5 s."""
    from precision_engine.models.decoder import _RoundKV

    x = torch.randn(4, 64, generator=_gen(5)).to(dtype)
    scale = torch.tensor(0.05)
    weights = torch.linspace(-1, 1, 64)

    def step(inp):
        return ((invariant.silu(inp).float() + _RoundKV.apply(inp, scale).float()) * weights).sum()

    grads = []
    for run in (step, torch.compile(step, backend="aot_eager", fullgraph=True)):
        leaf = x.clone().requires_grad_()
        run(leaf).backward()
        grads.append(leaf.grad)
    assert grads[0].abs().sum() > 0 and torch.equal(grads[0], grads[1])


def _attention_ref(q, k, v, q_pos, kv_len, scale):
    """float64 masked softmax attention over position-indexed keys."""
    b, hq, tq, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    kk = k.double().repeat_interleave(hq // hkv, dim=1)
    vv = v.double().repeat_interleave(hq // hkv, dim=1)
    scores = q.double() @ kk.transpose(-1, -2) * scale
    slot = torch.arange(s)
    visible = (slot[None, None, :] <= q_pos[:, :, None]) & (slot[None, None, :] < kv_len[:, None, None])
    scores = scores.masked_fill(~visible[:, None], -math.inf)
    out = torch.softmax(scores, -1).nan_to_num() @ vv
    return out


def _qkv(b, hq, hkv, s, d, dtype, seed):
    g = _gen(seed)
    return tuple(torch.randn(b, h, s, d, generator=g).to(dtype) for h in (hq, hkv, hkv))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hq,hkv", [(4, 2), (4, 4), (8, 1)])
def test_attention_matches_float64(dtype, hq, hkv):
    b, s, d = 3, 75, 64
    q, k, v = _qkv(b, hq, hkv, s, d, dtype, hq * 10 + hkv)
    lengths = torch.tensor([75, 40, 1])
    q_pos = torch.arange(s).expand(b, s).clone()
    q_pos[q_pos >= lengths[:, None]] = -1
    out = invariant.attention(q, k, v, q_pos, lengths, scale=d**-0.5)
    ref = _attention_ref(q, k, v, q_pos, lengths, d**-0.5)
    valid = q_pos >= 0
    assert _rel_err(out.transpose(1, 2)[valid], ref.transpose(1, 2)[valid]) < TOL[dtype]
    assert torch.isfinite(out).all() and (out.transpose(1, 2)[~valid] == 0).all()  # padding queries: zeros


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_decode_step_equals_full_forward_bitwise(dtype):
    """One query against a longer, partly stale cache gives the bits of its row of the causal forward."""
    b, hq, hkv, s, d = 3, 4, 2, 70, 64
    q, k, v = _qkv(b, hq, hkv, s, d, dtype, 7)
    lengths = torch.tensor([70, 45, 9])
    q_pos = torch.arange(s).expand(b, s).clone()
    q_pos[q_pos >= lengths[:, None]] = -1
    full = invariant.attention(q, k, v, q_pos, lengths, scale=d**-0.5)
    cache_len = 128  # the cache holds more slots than any row: stale values after each row's position
    k_cache = torch.randn(b, hkv, cache_len, d, generator=_gen(8)).to(dtype)
    v_cache = torch.randn(b, hkv, cache_len, d, generator=_gen(9)).to(dtype)
    for pos in (0, 8, 31, 32, 44, 69):
        rows = [r for r in range(b) if pos < lengths[r]]
        kc, vc = k_cache[rows].clone(), v_cache[rows].clone()
        kc[:, :, : pos + 1], vc[:, :, : pos + 1] = k[rows, :, : pos + 1], v[rows, :, : pos + 1]
        step = invariant.attention(
            q[rows, :, pos : pos + 1], kc, vc, torch.full((len(rows), 1), pos), torch.full((len(rows),), pos + 1),
            scale=d**-0.5,
        )
        assert torch.equal(step, full[rows, :, pos : pos + 1])


def test_attention_rows_are_independent_of_batch_and_order():
    b, hq, hkv, s, d = 5, 4, 2, 40, 64
    q, k, v = _qkv(b, hq, hkv, s, d, torch.bfloat16, 11)
    lengths = torch.tensor([40, 3, 33, 17, 40])
    q_pos = torch.arange(s).expand(b, s).clone()
    q_pos[q_pos >= lengths[:, None]] = -1
    full = invariant.attention(q, k, v, q_pos, lengths, scale=0.125)
    order = torch.tensor([3, 0, 4])
    part = invariant.attention(q[order], k[order], v[order], q_pos[order], lengths[order], scale=0.125)
    assert torch.equal(part, full[order])
    shorter = invariant.attention(q[:, :, :33], k[:, :, :33], v[:, :, :33], q_pos[:, :33], lengths.clamp(max=33),
                                  scale=0.125)
    assert torch.equal(shorter[2], full[2, :, :33])  # the sequence's own length, not the batch's, decides


def test_attention_reads_fp8_keys_as_dequantize_kv():
    b, hq, hkv, s, d = 2, 4, 2, 50, 64
    q, k, v = _qkv(b, hq, hkv, s, d, torch.bfloat16, 13)
    per_head = (torch.rand(hkv) * 0.02, torch.rand(hkv) * 0.02)
    for k_scale, v_scale in [(torch.tensor(0.01), torch.tensor(0.02)), per_head]:
        kq, vq = quantize_kv(k, k_scale), quantize_kv(v, v_scale)
        lengths = torch.tensor([50, 21])
        q_pos = torch.arange(s).expand(b, s).clone()
        fused = invariant.attention(q, kq, vq, q_pos, lengths, scale=0.125, k_scale=k_scale, v_scale=v_scale)
        rounded = invariant.attention(
            q, dequantize_kv(kq, k_scale, q.dtype), dequantize_kv(vq, v_scale, q.dtype), q_pos, lengths, scale=0.125
        )
        assert torch.equal(fused, rounded)


def test_gradients_flow_through_attention_and_linear():
    q, k, v = (t.requires_grad_() for t in _qkv(2, 4, 2, 20, 16, torch.float32, 17))
    w = torch.randn(8, 16, generator=_gen(18)).requires_grad_()
    q_pos = torch.arange(20).expand(2, 20)
    out = invariant.attention(q, k, v, q_pos, torch.tensor([20, 20]), scale=0.25)
    invariant.linear(out, w).square().sum().backward()
    ref_q = q.detach().clone().requires_grad_()
    ref = torch.nn.functional.scaled_dot_product_attention(
        ref_q, k.detach().repeat_interleave(2, 1), v.detach().repeat_interleave(2, 1), is_causal=True, scale=0.25
    )
    (ref @ w.detach().T).square().sum().backward()
    assert torch.allclose(q.grad, ref_q.grad, atol=1e-4, rtol=1e-4)  # fp32 cancellation: grads here are O(1)
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v, w))
