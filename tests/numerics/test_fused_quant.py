"""Fused producer + 1xG quantization (numerics/fused_quant.py) against the unfused ops, bitwise.

Without CUDA the kernels run in Triton's CPU interpreter (tiny shapes; the file takes ~3 s on one core):
- rms_norm_quantize: y equals triton_invariant.rms_norm (the same interpreter arithmetic) and the CPU
  twin invariant.rms_norm; the FP8 half equals quantize_rows_1xG(y) in bytes, scales and scale layout.
- silu_mul_quantize: the interpreter has no libdevice, so the kernel's exp is numpy's; h is checked against
  the twin's formula evaluated with numpy's exp (every other rounding is the kernel's own), and the FP8 half
  against quantize_rows_1xG(h). The GPU tests compare h with torch's own ops on all bf16 values.
- autograd: the output's gradients equal the unfused op's, bitwise; the FP8 half carries none.
Inputs are fresh Gaussians with row magnitudes spanning ~1e-5..1e5 (never zeros), some groups ragged, and no
subnormal bf16 (the interpreter's bf16 -> fp32 conversion gets those wrong, triton 3.9).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from precision_engine.errors import OperandError  # noqa: E402
from precision_engine.numerics import fused_quant as F  # noqa: E402
from precision_engine.numerics import invariant  # noqa: E402
from precision_engine.numerics import quantize as Q  # noqa: E402
from precision_engine.numerics.formats import DType, ScaleKind  # noqa: E402

from helpers import BASE, assert_bitwise  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ACT = BASE[2]  # e4m3 1x128
FMTS = [ACT, replace(ACT, dtype=DType.FLOAT8_E5M2, scale=ScaleKind.POW2), replace(ACT, group=32)]


def _rows(shape, seed, spread=2.5):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen)
    return (x * torch.exp(torch.randn(*shape[:-1], 1, generator=gen) * spread)).to(torch.bfloat16)


def _bits(t):
    return t.contiguous().view(torch.int16)


def _on_cpu(q):
    return replace(q, data=q.data.cpu(), scale=q.scale.cpu())


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.describe())
@pytest.mark.parametrize("shape", [(3, 256), (5, 384), (2, 3, 128)], ids=["even", "ragged-group", "leading-dims"])
def test_rms_norm_quantize_equals_the_unfused_pair(shape, fmt):
    from precision_engine.numerics import triton_invariant as TI

    x = _rows(shape, seed=shape[-1] + fmt.group)
    w = (1 + 0.2 * torch.randn(shape[-1], generator=torch.Generator().manual_seed(1))).to(torch.bfloat16)
    y, q = F.rms_norm_quantize(x.to(DEVICE), w.to(DEVICE), 1e-6, fmt, backend="triton")
    assert y.shape == x.shape and q.data.shape == (x.numel() // shape[-1], shape[-1])
    assert torch.equal(_bits(y.cpu()), _bits(TI.rms_norm(x.to(DEVICE), w.to(DEVICE), 1e-6).cpu()))
    if DEVICE == "cpu":
        assert torch.equal(_bits(y), _bits(invariant.rms_norm(x, w, 1e-6)))
    assert_bitwise(_on_cpu(q), Q.quantize_rows_1xG(y.cpu(), fmt, backend="reference"))


@pytest.mark.parametrize("fmt", [replace(ACT, group=48), ACT], ids=["group-48", "group-over-row"])
def test_rms_norm_quantize_groups_the_kernel_cannot_tile_compose_the_unfused_ops(fmt):
    """A non-power-of-two group, or a group longer than the row's block, takes the two unfused kernels."""
    h = 200 if fmt.group == 48 else 64
    x, w = _rows((4, h), seed=2), torch.ones(h, dtype=torch.bfloat16)
    y, q = F.rms_norm_quantize(x.to(DEVICE), w.to(DEVICE), 1e-5, fmt, backend="triton")
    ref_y, ref_q = F.rms_norm_quantize_reference(x.to(DEVICE), w.to(DEVICE), 1e-5, fmt)
    assert torch.equal(_bits(y), _bits(ref_y))
    assert_bitwise(_on_cpu(q), _on_cpu(ref_q))


def _silu_mul_with_numpy_exp(gate, up):
    """invariant.silu(gate) * up, one rounding per op, with numpy's fp32 exp (the interpreter's)."""
    g = gate.float()
    e = torch.from_numpy(np.exp(-g.numpy()))
    return (g / (1.0 + e)).to(gate.dtype) * up


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")
@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.describe())
@pytest.mark.parametrize("shape", [(9, 256), (4, 200), (2, 3, 128)], ids=["even", "ragged-group", "leading-dims"])
def test_silu_mul_quantize_equals_the_unfused_pair(shape, fmt):
    gate = (_rows(shape, seed=7, spread=1.5).float() * 4).to(torch.bfloat16)
    # exp overflows (s = -0), s is tiny, exp underflows, s is g / 2. (No bf16 subnormal anywhere: the
    # interpreter converts those to fp32 wrongly, triton 3.9; the GPU tests run every bf16 value.)
    gate.view(-1)[:4] = torch.tensor([-100.0, -85.0, 90.0, 1e-30])
    up = _rows(shape, seed=8)
    h, q = F.silu_mul_quantize(gate.to(DEVICE), up.to(DEVICE), fmt, backend="triton")
    assert h.shape == gate.shape and h.dtype == torch.bfloat16
    if DEVICE == "cuda":
        expected = invariant.silu(gate.to(DEVICE)) * up.to(DEVICE)
    else:
        expected = _silu_mul_with_numpy_exp(gate, up)
    assert torch.equal(_bits(h.cpu()), _bits(expected.cpu()))
    assert_bitwise(_on_cpu(q), Q.quantize_rows_1xG(h.cpu(), fmt, backend="reference"))


def test_cpu_tensors_compose_the_unfused_ops_by_default():
    x, w = _rows((3, 256), seed=4), torch.ones(256, dtype=torch.bfloat16)
    y, q = F.rms_norm_quantize(x, w, 1e-6, ACT)
    assert torch.equal(_bits(y), _bits(invariant.rms_norm(x, w, 1e-6)))
    assert_bitwise(q, Q.quantize_rows_1xG(y, ACT))
    gate, up = _rows((3, 256), seed=5), _rows((3, 256), seed=6)
    h, q = F.silu_mul_quantize(gate, up, ACT)
    assert torch.equal(_bits(h), _bits(invariant.silu(gate) * up))
    assert_bitwise(q, Q.quantize_rows_1xG(h, ACT))


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_gradients_are_the_unfused_ops(backend):
    """Autograd through the fused call gives the unfused op's gradients bit for bit (its backward recomputes
    that op), for the input and the weight / for gate and up; the FP8 half is not differentiable."""
    x = _rows((4, 256), seed=9).to(DEVICE).requires_grad_()
    w = (1 + 0.1 * torch.randn(256)).to(torch.bfloat16).to(DEVICE).requires_grad_()
    gy = _rows((4, 256), seed=10).to(DEVICE)
    y, q = F.rms_norm_quantize(x, w, 1e-6, ACT, backend=backend)
    assert not q.data.requires_grad and not q.scale.requires_grad
    gx, gw = torch.autograd.grad(y, (x, w), gy)
    op = invariant.rms_norm if DEVICE == "cpu" else __import__(
        "precision_engine.numerics.triton_invariant", fromlist=["rms_norm"]).rms_norm
    rx, rw = torch.autograd.grad(op(x, w, 1e-6), (x, w), gy)
    assert torch.equal(_bits(gx), _bits(rx)) and torch.equal(_bits(gw), _bits(rw))

    gate = _rows((4, 256), seed=11).to(DEVICE).requires_grad_()
    up = _rows((4, 256), seed=12).to(DEVICE)  # only gate needs a gradient here
    h, _ = F.silu_mul_quantize(gate, up, ACT, backend=backend)
    (gg,) = torch.autograd.grad(h, (gate,), gy)
    (rg,) = torch.autograd.grad(invariant.silu(gate) * up, (gate,), gy)
    assert torch.equal(_bits(gg), _bits(rg))


def test_empty_token_batch():
    y, q = F.rms_norm_quantize(torch.zeros(0, 256, dtype=torch.bfloat16).to(DEVICE),
                               torch.ones(256, dtype=torch.bfloat16).to(DEVICE), 1e-6, ACT, backend="triton")
    assert y.shape == (0, 256) and q.data.shape == (0, 256) and q.scale.shape == (0, 2)


def test_bad_requests_are_refused():
    x, w = torch.randn(2, 128), torch.ones(128)
    with pytest.raises(OperandError, match="1xG FP8 format"):
        F.rms_norm_quantize(x, w, 1e-6, BASE[3])
    with pytest.raises(OperandError, match="does not fit"):
        F.rms_norm_quantize(x, torch.ones(64), 1e-6, ACT)
    with pytest.raises(OperandError, match="differ"):
        F.silu_mul_quantize(x, torch.randn(2, 64), ACT)
    with pytest.raises(OperandError, match="backend"):
        F.silu_mul_quantize(x, x, ACT, backend="cuda")


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")
def test_silu_mul_quantize_reads_column_views_of_the_grouped_gate_up_output():
    """The decoder hands over gate and up as column halves of one [B, T, 2I] GEMM output (row stride 2I): the
    kernel must give the bytes it gives their contiguous copies (Triton's interpreter on the CPU)."""
    fmt = FMTS[0]
    both = (_rows((2, 3, 512), seed=9).float() * 2).to(torch.bfloat16).to(DEVICE)
    gate, up = both[..., :256], both[..., 256:]
    assert gate.stride(-2) == 512
    h, q = F.silu_mul_quantize(gate, up, fmt, backend="triton")
    h_ref, q_ref = F.silu_mul_quantize(gate.contiguous(), up.contiguous(), fmt, backend="triton")
    assert torch.equal(_bits(h.cpu()), _bits(h_ref.cpu()))
    assert_bitwise(_on_cpu(q), _on_cpu(q_ref))


def _silu_mul_grads_with_numpy_exp(gate, up, dh):
    """Autograd's gradients of invariant.silu(gate) * up, op by op in fp32 (mul's, then div's, exp's and neg's
    backward), with numpy's exp (the interpreter's): what the backward kernel computes."""
    g, e = gate.float(), torch.from_numpy(np.exp(-gate.float().numpy()))
    den = e + 1.0
    d_up = (dh.float() * (g / den).to(gate.dtype).float()).to(up.dtype)
    t = (dh.float() * up.float()).to(gate.dtype).float()
    via_den = torch.where((e == 0) | torch.isinf(e), 0.0, (t * ((g / den) / den)) * e)
    return (t / den + via_den).to(gate.dtype), d_up, t


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")
@pytest.mark.parametrize("shape", [(9, 256), (4, 200), (2, 3, 136)], ids=["even", "ragged", "leading-dims"])
def test_silu_mul_backward_kernel_is_autograds_arithmetic(shape):
    """The fused SiLU product's backward kernel gives autograd's bits through the unfused ops (on the GPU:
    torch's own autograd; in the interpreter: the same ops with numpy's exp), and those are the derivative:
    within bf16 rounding of float64's t * silu'(gate) (t = dh * up as mul's backward rounds it)."""
    gate = (_rows(shape, seed=13, spread=1.5).float() * 4).to(torch.bfloat16)
    gate.view(-1)[:5] = torch.tensor([-100.0, -85.0, 90.0, 1e-30, -1.278])  # exp overflow, underflow, silu' ~ 0
    up, dh = _rows(shape, seed=14), _rows(shape, seed=15)
    g, u = gate.to(DEVICE, copy=True).requires_grad_(), up.to(DEVICE, copy=True).requires_grad_()
    h, _ = F.silu_mul_quantize(g, u, ACT, backend="triton")
    d_gate, d_up = torch.autograd.grad(h, (g, u), dh.to(DEVICE))
    if DEVICE == "cuda":
        ref_gate, ref_up = torch.autograd.grad(invariant.silu(g) * u, (g, u), dh.to(DEVICE))
        t = (dh.to(DEVICE).float() * u.float()).to(torch.bfloat16).float()
    else:
        ref_gate, ref_up, t = _silu_mul_grads_with_numpy_exp(gate, up, dh)
    assert torch.equal(_bits(d_gate.cpu()), _bits(ref_gate.cpu()))
    assert torch.equal(_bits(d_up.cpu()), _bits(ref_up.cpu()))
    x = gate.double()
    sig = torch.sigmoid(x)
    exact = t.cpu().double() * sig * (1 + x * (1 - sig))
    # Finite everywhere (no 0 * inf where exp(-x) is inf or 0). Below x ~ -45 the chain's (x / den) / den
    # underflows fp32 and the gradient keeps only t / den, an absolute error under 1e-17 |t|.
    err = (d_gate.cpu().double() - exact).abs()
    assert bool((err <= 2**-7 * exact.abs() + 1e-17 * t.cpu().double().abs()).all())


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")
@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_packed_gate_up_gives_the_pairs_bits_and_one_gradient(backend):
    """silu_mul_quantize_packed on [gate | up] (one GEMM's output) equals silu_mul_quantize on the halves in
    h and its FP8 half, and its gradient is the halves' gradients side by side in one contiguous tensor."""
    both = (_rows((2, 3, 400), seed=16).float() * 3).to(torch.bfloat16).to(DEVICE).requires_grad_()
    dh = _rows((2, 3, 200), seed=17).to(DEVICE)
    h, q = F.silu_mul_quantize_packed(both, ACT, backend=backend)
    (grad,) = torch.autograd.grad(h, (both,), dh)
    gate, up = (half.detach().clone().requires_grad_() for half in both.split(200, dim=-1))
    h_ref, q_ref = F.silu_mul_quantize(gate, up, ACT, backend=backend)
    grad_ref = torch.cat(torch.autograd.grad(h_ref, (gate, up), dh), dim=-1)  # -0 stays -0, as split's backward
    assert torch.equal(_bits(h.cpu()), _bits(h_ref.cpu()))
    assert_bitwise(_on_cpu(q), _on_cpu(q_ref))
    assert grad.is_contiguous() and grad.shape == both.shape
    assert torch.equal(_bits(grad.cpu()), _bits(grad_ref.cpu()))
    with pytest.raises(OperandError, match="two equal halves"):
        F.silu_mul_quantize_packed(both[..., :399], ACT)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")
@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_silu_mul_differentiates_as_the_ops(backend):
    """silu_mul (the SwiGLU in front of a BF16 down_proj) is invariant.silu(gate) * up forward and backward,
    bit for bit, with its backward kernel (backend triton) or autograd through the ops (reference)."""
    gate = (_rows((5, 192), seed=18).float() * 3).to(torch.bfloat16).to(DEVICE)
    up = _rows((5, 192), seed=19).to(DEVICE)
    dh = _rows((5, 192), seed=20).to(DEVICE)
    g, u = gate.clone().requires_grad_(), up.clone().requires_grad_()
    h = F.silu_mul(g, u, backend=backend)
    got = torch.autograd.grad(h, (g, u), dh)
    g2, u2 = gate.clone().requires_grad_(), up.clone().requires_grad_()
    h_ref = invariant.silu(g2) * u2
    if DEVICE == "cuda" or backend == "reference":
        ref = torch.autograd.grad(h_ref, (g2, u2), dh)
    else:
        ref = _silu_mul_grads_with_numpy_exp(gate, up, dh)[:2]
    assert torch.equal(_bits(h.detach().cpu()), _bits(h_ref.detach().cpu()))
    assert all(torch.equal(_bits(a.cpu()), _bits(b.cpu())) for a, b in zip(got, ref))
    with pytest.raises(OperandError, match="differ"):
        F.silu_mul(g, u[:, :64])


def test_fast_packed_swiglu_is_autograds_bits_without_a_concatenation():
    """silu_mul_packed_fast (fast mode's SwiGLU on a fused gate/up output): F.silu(gate) * up forward, and
    autograd's gradients of that on the two halves, side by side in one contiguous tensor, bit for bit."""
    both = (_rows((2, 3, 384), seed=21).float() * 3).to(torch.bfloat16).to(DEVICE).requires_grad_()
    dh = _rows((2, 3, 192), seed=22).to(DEVICE)
    h = F.silu_mul_packed_fast(both)
    (grad,) = torch.autograd.grad(h, (both,), dh)
    gate, up = (half.detach().clone().requires_grad_() for half in both.split(192, dim=-1))
    h_ref = torch.nn.functional.silu(gate) * up
    ref = torch.cat(torch.autograd.grad(h_ref, (gate, up), dh), dim=-1)
    assert torch.equal(_bits(h.detach().cpu()), _bits(h_ref.detach().cpu()))
    assert grad.is_contiguous() and torch.equal(_bits(grad.cpu()), _bits(ref.cpu()))
    with torch.no_grad():
        assert torch.equal(_bits(F.silu_mul_packed_fast(both).cpu()), _bits(h_ref.detach().cpu()))
    with pytest.raises(OperandError, match="two equal halves"):
        F.silu_mul_packed_fast(both[..., :383])


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")
def test_swiglu_ops_compile_in_one_graph_with_eager_gradients():
    """torch.compile (aot_eager, fullgraph) traces the SwiGLU ops' custom backwards (no autograd.grad, no out=
    into views inside the graph) and gives eager's gradients bit for bit. About 3 s."""
    torch._dynamo.reset()
    both = (_rows((4, 256), seed=23).float() * 3).to(torch.bfloat16)

    def step(t):
        gate, up = t[:, :128], t[:, 128:]
        return (F.silu_mul_packed_fast(t).float().sum() + F.silu_mul(gate, up).float().sum()
                + F.silu_mul_quantize_packed(t, ACT, backend="reference")[0].float().sum()
                + F.silu_mul_quantize(gate, up, ACT, backend="reference")[0].float().sum())

    eager, compiled = both.clone().requires_grad_(), both.clone().requires_grad_()
    step(eager).backward()
    torch.compile(step, backend="aot_eager", fullgraph=True)(compiled).backward()
    assert torch.equal(_bits(eager.grad), _bits(compiled.grad))
