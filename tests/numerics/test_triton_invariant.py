"""Batch-invariant Triton kernels (`numerics.triton_invariant`'s ops: triton_linear, triton_norm, triton_rope,
triton_attention, triton_sampling's log_softmax) in Triton's CPU interpreter, tiny shapes.

What is measured:
- each kernel against float64 (tolerances below) and against its pure-torch twin;
- bitwise row invariance: M = 1, 3, 16, 67 prefixes, shuffled rows and padded calls give a row the same bits;
  linear's split-K and one-program launches give the same bits; attention gives a query the same bits in
  decode (one or two queries against a position-indexed cache holding NaN past kv_len) and in a causal
  forward, including chunked prefill whose tiles meet blocks fully masked for some rows, and padding queries.

Tolerances: bf16 outputs carry 2^-9 relative rounding per element, so norm-relative error < 4e-3 against
float64 (linear, rms_norm, attention, whose P @ V also rounds p to bf16 as flash attention does); fp32
log-softmax < 1e-5 absolute. In the interpreter the twins of linear and rms_norm match the kernels exactly;
attention's twin is within the same bf16 tolerance (a few elements differ by the interpreter's dot order).
The whole file takes ~15 s on one core.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton")

from precision_engine.numerics import triton_attention, triton_linear  # noqa: E402
from precision_engine.numerics import triton_invariant as TI  # noqa: E402
from precision_engine.numerics.contract import TRITON_INTERPRET  # noqa: E402

from helpers import run_offline_compile  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROWS = (1, 3, 16, 67)


def _rel(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    return ((out - ref).norm() / ref.norm()).item()


def _bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def _same_bits(a, b):
    return torch.equal(_bits(a.contiguous()), _bits(b.contiguous()))


def _randn(*shape, seed, scale=1.0, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEVICE)


def test_runs_in_the_interpreter_without_a_gpu():
    if DEVICE == "cpu":
        assert os.environ.get("TRITON_INTERPRET") == "1" and TRITON_INTERPRET


# ---------------------------------------------------------------------------------------------------- linear

def test_segments_depend_on_n_and_k_only():
    """8B shapes split K into >= 1024-wide segments; a weight too short to split keeps one segment."""
    for n, k in [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (128256, 4096)]:
        assert TI.segment_kb(n, k) * triton_linear.BLOCK_K >= 1024 and TI.segment_kb(n, k) <= TI.segment_kb(n, k * 2)
    assert TI.segment_kb(128256, 4096) * triton_linear.BLOCK_K == 4096  # the lm_head has programs enough: one segment
    assert TI.segment_kb(64, 256) * triton_linear.BLOCK_K == 256


@pytest.mark.parametrize("m,n,k,bias", [(67, 64, 1024, True), (5, 200, 320, False), (16, 130, 72, True)])
def test_linear_matches_float64_and_twin(m, n, k, bias):
    x = _randn(m, k, seed=m)
    w = _randn(n, k, seed=n, scale=0.05)
    b = _randn(n, seed=k) if bias else None
    out = TI.linear(x, w, b)
    ref = x.double() @ w.double().T + (b.double() if bias else 0)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert _rel(out, ref) < 4e-3
    assert _same_bits(out, TI.linear_twin(x, w, b)) or _rel(out, TI.linear_twin(x, w, b)) < 4e-3


def test_linear_rows_bitwise_batch_invariant():
    """Prefixes, a shuffle, padding rows and leading dims: one set of bits per row (2 K segments here)."""
    x = _randn(67, 2048, seed=1)
    w = _randn(64, 2048, seed=2, scale=0.05)
    b = _randn(64, seed=3)
    assert TI.segment_kb(64, 2048) * triton_linear.BLOCK_K < 2048
    full = TI.linear(x, w, b)
    for m in ROWS:
        assert _same_bits(TI.linear(x[:m], w, b), full[:m]), m
    perm = torch.randperm(67, generator=torch.Generator().manual_seed(0))
    assert _same_bits(TI.linear(x[perm], w, b), full[perm])
    padded = torch.cat([x[:5], _randn(11, 2048, seed=9) * 100])
    assert _same_bits(TI.linear(padded, w, b)[:5], full[:5])
    assert _same_bits(TI.linear(x[:6].reshape(2, 3, 2048), w, b).reshape(6, 64), full[:6])


def test_linear_launches_give_the_same_bits():
    """Split-K with the in-kernel segment sum, one program per tile, persistent, plain loads: one set of bits."""
    from dataclasses import replace

    x = _randn(20, 1024, seed=4)
    w = _randn(130, 1024, seed=5, scale=0.05)
    ref = TI.linear_forward(x, w, split=False)
    assert _same_bits(TI.linear_forward(x, w, split=True), ref)
    assert _same_bits(TI.linear_forward(x, w, split=False, config=replace(TI.LINEAR, persistent=True)), ref)
    original = triton_linear._tma_ok
    try:
        triton_linear._tma_ok = lambda t: False
        assert _same_bits(TI.linear_forward(x, w, split=True), ref)
    finally:
        triton_linear._tma_ok = original


def test_linear_backward_matches_float64():
    x = _randn(9, 96, seed=6).requires_grad_()
    w = _randn(40, 96, seed=7, scale=0.1).requires_grad_()
    b = _randn(40, seed=8).requires_grad_()
    gy = _randn(9, 40, seed=9)
    TI.linear(x, w, b).backward(gy)
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    (xd @ wd.T + bd).backward(gy.double())
    for got, ref in ((x.grad, xd.grad), (w.grad, wd.grad), (b.grad, bd.grad)):
        assert _rel(got, ref) < 4e-3


def test_linear_refuses_fp32():
    from precision_engine.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="bf16 or fp16"):
        TI.linear(torch.randn(2, 16), torch.randn(4, 16))


# -------------------------------------------------------------------------------------------------- rms_norm

def _rms64(x, w, eps):
    x64 = x.double()
    return w.double() * (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps))


@pytest.mark.parametrize("h,wdtype", [(320, torch.bfloat16), (128, torch.float32)])
def test_rms_norm_matches_float64_and_twin(h, wdtype):
    x = _randn(67, h, seed=h, scale=3.0)
    w = _randn(h, seed=1, dtype=wdtype)
    out = TI.rms_norm(x, w, 1e-6)
    assert out.dtype == torch.promote_types(x.dtype, wdtype)
    assert _rel(out, _rms64(x, w, 1e-6)) < 4e-3
    assert _same_bits(out, TI.rms_norm_twin(x, w, 1e-6))


def test_rms_norm_rows_bitwise_batch_invariant():
    x = _randn(67, 256, seed=2)
    w = _randn(256, seed=3)
    full = TI.rms_norm(x, w, 1e-5)
    for m in ROWS:
        assert _same_bits(TI.rms_norm(x[:m], w, 1e-5), full[:m]), m
    perm = torch.randperm(67, generator=torch.Generator().manual_seed(1))
    assert _same_bits(TI.rms_norm(x[perm].reshape(67, 1, 256), w, 1e-5).reshape(67, 256), full[perm])


def test_rms_norm_backward_matches_float64():
    x = _randn(7, 64, seed=4).requires_grad_()
    w = _randn(64, seed=5).requires_grad_()
    gy = _randn(7, 64, seed=6)
    TI.rms_norm(x, w, 1e-6).backward(gy)
    xd, wd = (t.detach().double().requires_grad_() for t in (x, w))
    _rms64(xd, wd, 1e-6).backward(gy.double())
    assert _rel(x.grad, xd.grad) < 1e-2 and _rel(w.grad, wd.grad) < 1e-2


@pytest.mark.parametrize("shape,wdtype", [((67, 320), torch.bfloat16), ((2, 40, 256), torch.float32)],
                         ids=["ragged-programs", "leading-dims-fp32-weight"])
def test_rms_norm_backward_kernel_per_element(shape, wdtype):
    """The one-pass backward (rows over several programs, the last one ragged; H not a power of two; an fp32
    weight) against float64 element by element. The kernel rounds g = dy * w and h to bf16, as the forward's
    arithmetic does, so dx is within 2^-7 of its two terms' magnitudes plus the rounding of g carried through
    mean(g * x) (2^-7 of x inv^3 mean|g x|), and dweight within 2^-7 of the sum of |dy * h|; and both are within
    1e-2 (norm-relative) of autograd through the torch ops the kernel replaced."""
    x = _randn(*shape, seed=8, scale=3.0)
    x = (x.float() * torch.exp(_randn(*shape[:-1], 1, seed=9).float())).to(torch.bfloat16)  # rows ~0.1x..10x
    w = _randn(shape[-1], seed=10, dtype=wdtype)
    gy = _randn(*shape, seed=11)
    dx, dw = TI.rms_norm_backward(x, w, 1e-6, gy)
    assert dx.shape == x.shape and dx.dtype == x.dtype and dw.shape == w.shape and dw.dtype == w.dtype
    x64, g64 = x.double().cpu(), (gy.double() * w.double()).cpu()
    inv = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
    second = x64 * inv**3 * (g64 * x64).mean(-1, keepdim=True)
    bound = 2**-7 * ((inv * g64).abs() + second.abs() + (x64 * inv**3).abs() * (g64 * x64).abs().mean(-1, keepdim=True))
    assert bool(((dx.double().cpu() - (inv * g64 - second)).abs() <= bound).all())
    dyh = (gy.double().cpu() * x64 * inv).reshape(-1, shape[-1])
    assert bool(((dw.double().cpu() - dyh.sum(0)).abs() <= 2**-7 * dyh.abs().sum(0) + 1e-30).all())
    xd, wd = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = torch.autograd.grad(TI.rms_norm_twin(xd, wd, 1e-6), (xd, wd), gy)
    assert _rel(dx, ref[0]) < 1e-2 and _rel(dw, ref[1]) < 1e-2


# ----------------------------------------------------------------------------------------------- log_softmax

@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_softmax_matches_float64_and_twin(temperature):
    """V = 5000 spans two 4096-wide chunks; -inf logits (masked vocabulary) give -inf, never NaN."""
    logits = _randn(13, 5000, seed=7, scale=4.0)
    logits[:, 4500:4600] = float("-inf")
    out = TI.log_softmax(logits, temperature)
    ref = torch.log_softmax(logits.double() / temperature, -1)
    assert out.dtype == torch.float32
    assert torch.equal(torch.isinf(out), torch.isinf(ref)) and not torch.isnan(out).any()
    finite = torch.isfinite(ref)
    assert (out.double() - ref)[finite].abs().max().item() < 1e-5
    assert (out - TI.log_softmax_twin(logits, temperature))[finite].abs().max().item() < 1e-5


def test_log_softmax_rows_bitwise_batch_invariant():
    logits = _randn(67, 4100, seed=8, scale=3.0, dtype=torch.float32)
    full = TI.log_softmax(logits, 0.9)
    for m in ROWS:
        assert _same_bits(TI.log_softmax(logits[:m], 0.9), full[:m]), m
    perm = torch.randperm(67, generator=torch.Generator().manual_seed(2))
    assert _same_bits(TI.log_softmax(logits[perm], 0.9), full[perm])


def test_log_softmax_backward_matches_float64():
    """The trainer backpropagates its policy loss through the logprobs: the kernel's output carries a gradient."""
    logits = _randn(5, 700, seed=10, scale=3.0).requires_grad_()
    gy = _randn(5, 700, seed=11, dtype=torch.float32)
    out = TI.log_softmax(logits, 0.7)
    assert out.requires_grad
    out.backward(gy)
    ld = logits.detach().double().requires_grad_()
    torch.log_softmax(ld / 0.7, -1).backward(gy.double())
    assert logits.grad.dtype == torch.bfloat16 and _rel(logits.grad, ld.grad) < 1e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rope_equals_torch_ops_bitwise(dtype):
    """One launch gives the bits of torch's x * cos + rotate_half(x) * sin (three rounded ops), decode and
    prefill shapes, strided x (a view of a fused projection), as [B, H, T, D]."""
    for b, t, h, d in ((3, 5, 4, 16), (2, 1, 3, 32), (1, 7, 8, 64)):
        x = _randn(b, t, 2 * h * d, seed=12, scale=3.0, dtype=dtype)[..., : h * d].view(b, t, h, d)
        angle = _randn(b, t, d, seed=13, scale=50.0, dtype=torch.float32)
        cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
        xt, half = x.transpose(1, 2), d // 2
        ref = xt * cos[:, None] + torch.cat((-xt[..., half:], xt[..., :half]), dim=-1) * sin[:, None]
        out = TI.rope(x, cos, sin)
        assert out.shape == (b, h, t, d) and _same_bits(out, ref), (b, t, h, d)


def test_rope_with_autograd_runs_the_kernel_and_differentiates():
    """With x requiring a gradient (the trainer's forward) the output still has the kernel's bits, and the
    gradient is that of torch's ops in float64 (bf16 rounding of the fp32 result only)."""
    b, t, h, d = 2, 5, 3, 32
    x = _randn(b, t, h, d, seed=15, scale=3.0, dtype=torch.bfloat16).requires_grad_()
    angle = _randn(b, t, d, seed=16, scale=50.0, dtype=torch.float32)
    cos, sin = angle.cos().to(torch.bfloat16), angle.sin().to(torch.bfloat16)
    out = TI.rope(x, cos, sin)
    with torch.no_grad():
        assert out.requires_grad and _same_bits(out, TI.rope(x, cos, sin))
    gy = _randn(b, h, t, d, seed=17, dtype=torch.float32).to(torch.bfloat16)
    out.backward(gy)
    xd = x.detach().double().requires_grad_()
    xt, half = xd.transpose(1, 2), d // 2
    ref = xt * cos.double()[:, None] + torch.cat((-xt[..., half:], xt[..., :half]), dim=-1) * sin.double()[:, None]
    ref.backward(gy.double())
    assert x.grad.dtype == torch.bfloat16 and _rel(x.grad, xd.grad) < 1e-2


@pytest.mark.parametrize("per_head, heads_per_program", [(False, 8), (True, 8), (True, 3)])
def test_kv_write_gives_the_bytes_of_quantize_kv_and_index_put(per_head, heads_per_program, monkeypatch):
    """BF16 and FP8 stores, strided k (a view of a fused projection), decode and prefill shapes, +-Inf (stored
    as NaN) and values past 448 (saturated), all heads in one program or split (3 a program: a partial last
    block): the bytes of torch's quantize_kv and advanced-index write."""
    from precision_engine.numerics.kv_cache import quantize_kv

    monkeypatch.setattr(triton_attention, "KV_WRITE_HEADS", {True: heads_per_program, False: heads_per_program})

    g = torch.Generator().manual_seed(14)
    for fp8 in (False, True):
        for b, t, h, d, s in ((3, 1, 2, 16, 40), (2, 5, 4, 32, 64)):
            k = _randn(b, t, 2 * h * d, seed=15, scale=5.0)[..., : h * d].view(b, t, h, d).transpose(1, 2)
            v = _randn(b, t, h, d, seed=16, scale=5.0).transpose(1, 2)
            k[0, 0, 0, :3] = torch.tensor([float("inf"), float("-inf"), 1e30])
            pos = torch.stack([torch.randperm(s, generator=g)[:t] for _ in range(b)]).to(DEVICE)
            ks, vs = (torch.rand(h if per_head else (), generator=g).to(DEVICE) * 0.05 + 1e-3 for _ in range(2))
            dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
            out_k, out_v = (torch.zeros(b + 1, h, s, d, dtype=dtype, device=DEVICE) for _ in range(2))
            ref_k, ref_v = out_k.clone(), out_v.clone()
            qk, qv = (quantize_kv(k, ks), quantize_kv(v, vs)) if fp8 else (k, v)
            rows = torch.arange(b, device=DEVICE)[:, None].expand(b, t)
            ref_k[rows, :, pos], ref_v[rows, :, pos] = qk.transpose(1, 2), qv.transpose(1, 2)
            TI.kv_write(k, v, pos, out_k, out_v, *((ks, vs) if fp8 else (None, None)))
            for out, ref in ((out_k, ref_k), (out_v, ref_v)):
                assert torch.equal(out.view(torch.uint8), ref.view(torch.uint8)), (fp8, b, t, h, d)


def test_log_softmax_divides_by_the_temperature_exactly():
    """logits.float() / temperature is correctly rounded: a one-hot-free row keeps torch's division bits."""
    logits = _randn(2, 300, seed=9, dtype=torch.float32)
    y = logits / 0.3
    out = TI.log_softmax(logits, 0.3)
    assert torch.allclose(out, torch.log_softmax(y, -1), atol=2e-6, rtol=0)
    with pytest.raises(ValueError, match="temperature"):
        TI.log_softmax(logits, 0.0)


# ------------------------------------------------------------------------------------------------- attention

def _cache(b, hkv, s, d, filled, seed):
    """A position-indexed cache: slots >= filled[b] hold NaN, as uninitialised preallocated memory may."""
    k, v = _randn(b, hkv, s, d, seed=seed), _randn(b, hkv, s, d, seed=seed + 1)
    for i, n in enumerate(filled):
        k[i, :, n:] = float("nan")
        v[i, :, n:] = float("nan")
    return k, v


def _causal(q, k, v, lengths, offset=0):
    """Full causal forward of queries at positions offset..offset+Tq-1 against a cache of `lengths` slots."""
    b, _, tq, d = q.shape
    q_pos = (torch.arange(tq) + offset).repeat(b, 1).to(DEVICE)
    kv_len = torch.tensor(lengths, device=DEVICE)
    return TI.attention(q, k, v, q_pos, kv_len, scale=d ** -0.5), q_pos, kv_len


@pytest.mark.parametrize("hq,hkv,d", [(4, 2, 32), (2, 2, 16)])
def test_attention_matches_float64_and_twin(hq, hkv, d):
    q = _randn(2, hq, 80, d, seed=10)
    k, v = _cache(2, hkv, 140, d, [100, 120], seed=11)
    q_pos = torch.stack([torch.arange(80) + 20, torch.arange(80) + 40]).to(DEVICE)
    q_pos[0, -3:] = -1  # padding queries
    kv_len = torch.tensor([100, 120], device=DEVICE)
    out = TI.attention(q, k, v, q_pos, kv_len, scale=d ** -0.5)
    ref = TI.attention_reference(q.double(), k.double(), v.double(), q_pos, kv_len, scale=d ** -0.5)
    assert out.shape == q.shape and torch.isfinite(out).all()
    assert torch.equal(out[0, :, -3:], torch.zeros_like(out[0, :, -3:]))
    assert _rel(out, ref) < 4e-3
    assert _rel(TI.attention_twin(q, k, v, q_pos, kv_len, scale=d ** -0.5), ref) < 4e-3


@pytest.mark.parametrize("offset", [0, 40])
def test_attention_decode_equals_causal_forward_bitwise(offset):
    """Each query's row of the causal forward (offset 40: a chunked prefill whose tiles meet KV blocks fully
    masked for their early rows) equals that query decoded alone, or as one of two, against the cache."""
    b, hq, hkv, d, t = 2, 4, 2, 32, 90
    q = _randn(b, hq, t, d, seed=12)
    k, v = _cache(b, hkv, 160, d, [offset + t] * b, seed=13)
    full, q_pos, _ = _causal(q, k, v, [offset + t] * b, offset)
    for i in (0, 1, 37, 63, 64, 89):
        one = TI.attention(q[:, :, i:i + 1], k, v, q_pos[:, i:i + 1], q_pos[:, i] + 1, scale=d ** -0.5)
        assert _same_bits(one, full[:, :, i:i + 1]), i
    two = TI.attention(q[:, :, 50:52], k, v, q_pos[:, 50:52], q_pos[:, 51] + 1, scale=d ** -0.5)
    assert _same_bits(two, full[:, :, 50:52])


def test_attention_batch_invariant_bitwise():
    """A sequence's rows do not depend on the other sequences in the batch, their order, or their lengths."""
    b, hq, hkv, d, t = 3, 4, 1, 32, 70
    q = _randn(b, hq, t, d, seed=14)
    lengths = [70, 50, 66]
    k, v = _cache(b, hkv, 96, d, lengths, seed=15)
    q_pos = torch.arange(t).repeat(b, 1).to(DEVICE)
    for i, n in enumerate(lengths):
        q_pos[i, n:] = -1  # right padding of the ragged batch
    kv_len = torch.tensor(lengths, device=DEVICE)
    full = TI.attention(q, k, v, q_pos, kv_len, scale=d ** -0.5)
    for i in range(b):
        one = TI.attention(q[i:i + 1], k[i:i + 1], v[i:i + 1], q_pos[i:i + 1], kv_len[i:i + 1], scale=d ** -0.5)
        assert _same_bits(one, full[i:i + 1]), i
    perm = torch.tensor([2, 0, 1])
    assert _same_bits(TI.attention(q[perm], k[perm], v[perm], q_pos[perm], kv_len[perm], scale=d ** -0.5),
                      full[perm])


@pytest.mark.parametrize("causal,from_lse", [(False, False), (True, False), (True, True)])
def test_attention_backward_matches_float64(causal, from_lse, monkeypatch):
    """A right-padded teacher-forcing batch, its padding slots NaN and its padding queries given a gradient: the
    backward (masked SDPA; with `causal`, SDPA over the triangle recomputed, or a fused backward from the kernel's
    own logsumexp) ignores both."""
    monkeypatch.setattr(triton_attention, "lse_backward_fits", lambda *inputs: from_lse)
    b, hq, hkv, d, t = 2, 4, 2, 16, 20
    q = _randn(b, hq, t, d, seed=16).requires_grad_()
    k, v = _cache(b, hkv, t, d, [t, 15], seed=17)
    k.requires_grad_(), v.requires_grad_()
    q_pos = torch.arange(t).repeat(b, 1).to(DEVICE)
    q_pos[1, 15:] = -1
    kv_len = torch.tensor([t, 15], device=DEVICE)
    gy = _randn(b, hq, t, d, seed=19)
    TI.attention(q, k, v, q_pos, kv_len, scale=0.25, causal=causal).backward(gy)
    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    TI.attention_reference(qd, kd, vd, q_pos, kv_len, scale=0.25).backward(gy.double())
    for got, ref in ((q.grad, qd.grad), (k.grad, kd.grad), (v.grad, vd.grad)):
        assert torch.isfinite(got).all() and _rel(got, ref) < 1e-2


def test_attention_logsumexp_matches_float64():
    """The training forward's logsumexp (natural log, scaled scores) within 1e-5 of float64 on every query of a
    right-padded GQA batch, +inf where a query sees nothing; the output's bits the same with it or without."""
    b, hq, hkv, d, t = 3, 4, 2, 16, 24
    q = _randn(b, hq, t, d, seed=22)
    k, v = _cache(b, hkv, t, d, [t, 13, 1], seed=23)
    kv_len = torch.tensor([t, 13, 1], device=DEVICE)
    cols = torch.arange(t, device=DEVICE)
    q_pos = torch.where(cols < kv_len[:, None], cols, -1)
    lse = torch.full((b, hq, t), float("nan"), device=DEVICE)
    out = triton_attention.attention_forward(q, k, v, q_pos, kv_len, scale=0.25, logsumexp=lse)
    assert _same_bits(out, triton_attention.attention_forward(q, k, v, q_pos, kv_len, scale=0.25))
    kd = torch.nan_to_num(k.double()).repeat_interleave(hq // hkv, 1)
    scores = (q.double() @ kd.transpose(-1, -2)) * 0.25
    seen = triton_attention.visible_slots(q_pos, kv_len, t)[:, None]
    want = scores.masked_fill(~seen, float("-inf")).logsumexp(-1)
    real = seen.any(-1).expand_as(lse)
    assert (lse[real].double() - want[real]).abs().max() < 1e-5
    assert torch.equal(lse[~real], torch.full_like(lse[~real], float("inf"))) and (~real).any()
    with pytest.raises(ValueError, match="logsumexp"):
        triton_attention.attention_forward(q, k, v, q_pos, kv_len, scale=0.25, logsumexp=lse[:, :, :4])


def test_attention_causal_takes_as_many_queries_as_slots():
    q = _randn(1, 2, 4, 16, seed=20)
    k, v = _cache(1, 2, 8, 16, [8], seed=21)
    with pytest.raises(ValueError, match="causal"):
        TI.attention(q, k, v, torch.arange(4)[None].to(DEVICE), torch.tensor([8], device=DEVICE), scale=0.25,
                     causal=True)


def test_attention_refuses_odd_head_dims():
    from precision_engine.errors import UnsupportedError

    q = torch.zeros(1, 1, 1, 24, dtype=torch.bfloat16)
    with pytest.raises(UnsupportedError, match="head dim"):
        TI.attention(q, q, q, torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.long), scale=1.0)


_COMPILE_FOR_SM90 = r'''
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from precision_engine.numerics import triton_attention as TA
from precision_engine.numerics import triton_linear as TL
from precision_engine.numerics import triton_norm as TN
from precision_engine.numerics import triton_rope as TR

def compile_(fn, types, constexprs, divisible=(), **opts):
    """PTX for sm_90; pointers (and the integer arguments named in `divisible`) taken as multiples of 16, as the
    runtime specialises them."""
    sig = dict(zip(fn.arg_names, types + ["constexpr"] * len(constexprs)))
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(types)
             if t.startswith("*") or fn.arg_names[i] in divisible}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts).asm["ptx"]

lin = ["tensordesc<bf16[64, 128]>", "tensordesc<bf16[128, 128]>", "*bf16", "*fp32", "*i32", "*bf16"] + ["i32"] * 6
for split, persistent in ((False, False), (True, False), (False, True)):
    ptx = compile_(TL._linear_kernel, lin, dict(HAS_BIAS=True, SPLIT=split, PERSISTENT=persistent, TMA=True,
                   INTERPRET=False, BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=8), num_warps=4, num_stages=4)
    assert "wgmma.mma_async" in ptx and "mma.sync" not in ptx
att = ["*bf16"] * 4 + ["*fp8e4nv", "*fp32", "*fp32", "*i64", "*i64", "*fp32", "*fp32", "fp32"] + ["i32"] * 17
# a contiguous head dim of 128: every stride but the positions' (not specialised) is a multiple of 16
strides = [n for n in TA._attention_kernel.arg_names if n.startswith("stride_") and n not in ("stride_pb", "stride_pt")]
for lse in (False, True):  # the training forward stores its logsumexp for the fused backward
    ptx = compile_(TA._attention_kernel, att, dict(G=4, D=128, BLOCK_M=64, BLOCK_N=64, FP8_KV=False,
                   SCALE_PER_HEAD=False, FOLD_SCALES=False, INTERPRET=False, LSE=lse, QUANT=False, **TA._NO_QUANT),
                   divisible=strides, num_warps=TA.ATTN_WARPS, num_stages=TA.ATTN_STAGES)
    assert "wgmma.mma_async" in ptx and "mma.sync" not in ptx
    assert "cp.async.cg.shared.global" in ptx and "ld.global.b16" not in ptx  # K, V pipelined in 16-byte copies
att_fp8 = ["*bf16", "*fp8e4nv", "*fp8e4nv", "*bf16"] + att[4:]
e4m3 = dict(FMAX=448.0, RFMAX=1 / 448.0, MBITS=3, EMIN=-6, POW2=False, EXACT_ROUND=False)
compile_(TA._attention_kernel, att_fp8, dict(G=4, D=128, BLOCK_M=16, BLOCK_N=64, FP8_KV=True, SCALE_PER_HEAD=True,
         FOLD_SCALES=True, INTERPRET=False, LSE=False, QUANT=True, **e4m3), num_warps=4, num_stages=3)  # fast decode, o_proj's Q
compile_(TN._rms_norm_kernel, ["*bf16", "*bf16", "*bf16", "i32", "i32", "i32", "fp32"],
         dict(BLOCK_H=4096, INTERPRET=False), num_warps=8)
compile_(TN._rms_norm_backward_kernel, ["*bf16"] * 4 + ["*fp32"] + ["i32"] * 5 + ["fp32"],
         dict(ROWS=TN.RMS_BACKWARD_ROWS, BLOCK_H=4096, INTERPRET=False), num_warps=32)
from precision_engine.numerics import triton_fused_quant as TF
compile_(TF._silu_mul_backward_kernel, ["*bf16"] * 5 + ["i32"] * 7,
         dict(WANT_G=True, WANT_U=True, BLOCK_M=1, BLOCK_K=1024, INTERPRET=False), num_warps=4,
         **TF._exact_options())
compile_(TR._rope_kernel, ["*bf16"] * 4 + ["i32"] * 7, dict(D=128, BLOCK_H=32, INTERPRET=False), num_warps=4)
compile_(TA._kv_write_kernel, ["*bf16", "*bf16", "*i64", "*fp8e4nv", "*fp8e4nv", "*fp32", "*fp32"] + ["i32"] * 13,
         dict(D=128, HB=2, BLOCK_H=2, FP8_KV=True, SCALE_PER_HEAD=False, EXACT_ROUND=False), num_warps=4)
compile_(TA._kv_write_kernel, ["*bf16", "*bf16", "*i64", "*bf16", "*bf16", "*i64", "*i64"] + ["i32"] * 13,
         dict(D=128, HB=8, BLOCK_H=8, FP8_KV=False, SCALE_PER_HEAD=False, EXACT_ROUND=False), num_warps=4)
from precision_engine.numerics import triton_quant as TQ
# Q(W), and Q(W) with Q(W)^T in the same pass: as bytes, and as words of four rows
for transposed, pack in ((False, 1), (True, 1), (True, 4)):
    compile_(TQ._blocks_kernel, ["*bf16", "*fp8e4nv", "*fp32", "*fp8e4nv", "*fp32"] + ["i32"] * 7,
             dict(BR=128, BC=128, BLOCK_R=128, BLOCK_C=128, **e4m3, TRANSPOSED=transposed, PACK=pack, BLOCK_SUB=32,
                  HW_PACK=True), num_warps=8)
print("ok")
'''


@pytest.mark.slow
def test_kernels_compile_for_hopper_on_tensor_cores():
    """Ahead-of-time compilation for sm_90 with this machine's Triton (no GPU needed; ~10-30 s): every kernel
    lowers (with the training backward kernels of RMSNorm and the SiLU product, and the weight quantizer writing
    both layouts), and linear (all three launches) and attention multiply on wgmma, never mma.sync, whatever M;
    attention, its strides specialised as at run time, loads K and V in pipelined 16-byte copies."""
    run_offline_compile(_COMPILE_FOR_SM90)
