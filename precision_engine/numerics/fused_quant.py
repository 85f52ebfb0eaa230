"""Activation quantization fused into the op before the FP8 linear: RMSNorm -> 1xG and SiLU(gate) * up -> 1xG;
and the residual add fused into the RMSNorm after it (`add_rms_norm`, with or without the quantization).

Jet-RL fuses the 1x128 quantization of every linear's input into the op that produces it. Our ops in front of
the linears are the norms (before q/k/v and gate/up) and the SwiGLU product (before down). Each function
returns the op's output, bit for bit what the unfused op gives, and its `quantize_rows_1xG` quantization, bit
for bit what quantizing that output gives; an FP8 linear that takes the quantized input then skips its own
quantizer. The output stays in the graph with the unfused op's gradients, bit for bit: the fused SiLU
product's backward is one Triton kernel (`triton_fused_quant.silu_mul_backward`), the RMSNorm's is the
unfused norm's own (`triton_norm.rms_norm_backward` on the GPU); the FP8 half carries no gradient. A fused
gate/up GEMM hands its output over whole (`silu_mul_quantize_packed`), so its gradient needs no concatenation
of two halves.

``backend``: "auto" runs one Triton kernel per call for CUDA tensors (`triton_fused_quant`) and the composed
unfused ops otherwise; "reference" always composes the unfused ops (on CUDA: the batch-invariant RMSNorm
kernel, torch's SiLU ops and the 1xG Triton quantizer, the bits the fused kernel must equal); "triton" forces
the fused kernel (on the CPU under TRITON_INTERPRET=1). A group size the RMSNorm kernel cannot tile (not a
power of two, or longer than the row's block) composes the unfused kernels instead.

`add_rms_norm` saves the decoder a launch per norm where launches are the cost (a CUDA-graph decode step on
8B shapes: torch's add ~1.7 us, then the norm). It is forward-only: with autograd recorded it runs the
separate ops, whose backward the trainer needs and whose bits the kernel equals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from precision_engine.errors import OperandError
from precision_engine.numerics import invariant
from precision_engine.numerics.contract import Quantized
from precision_engine.numerics.formats import Axis, Granularity, QuantFormat
from precision_engine.numerics.quantize import BACKENDS, quantize_rows_1xG


def rms_norm_quantize(x: torch.Tensor, weight: torch.Tensor, eps: float, fmt: QuantFormat, *,
                      backend: str = "auto") -> tuple[torch.Tensor, Quantized]:
    """(invariant.rms_norm(x, weight, eps), quantize_rows_1xG(that, fmt)); x [..., H], the FP8 half [tokens, H]."""
    _check_fmt(fmt)
    if weight.shape != (x.shape[-1],):
        raise OperandError(f"rms_norm_quantize: weight {tuple(weight.shape)} does not fit x {tuple(x.shape)}")
    return _apply(_RMS_NORM, x, weight, eps, fmt, backend)


def silu_mul_quantize(gate: torch.Tensor, up: torch.Tensor, fmt: QuantFormat, *,
                      backend: str = "auto") -> tuple[torch.Tensor, Quantized]:
    """(invariant.silu(gate) * up, quantize_rows_1xG(that, fmt)): the SwiGLU product in front of down_proj."""
    _check_fmt(fmt)
    if gate.shape != up.shape:
        raise OperandError(f"silu_mul_quantize: gate {tuple(gate.shape)} and up {tuple(up.shape)} differ")
    return _apply(_SILU_MUL, gate, up, None, fmt, backend)


def silu_mul(gate: torch.Tensor, up: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """invariant.silu(gate) * up with the fused SiLU product's backward (one kernel for CUDA tensors, the same
    bits as autograd through the ops): the SwiGLU of a batch-invariant forward whose down_proj is not FP8."""
    if backend not in BACKENDS:
        raise OperandError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if gate.shape != up.shape:
        raise OperandError(f"silu_mul: gate {tuple(gate.shape)} and up {tuple(up.shape)} differ")
    if torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad):
        return _SiluMul.apply(gate, up, backend == "triton" or (backend == "auto" and gate.is_cuda))
    return _silu_mul_op(gate, up, None)


def silu_mul_packed_fast(gate_up: torch.Tensor) -> torch.Tensor:
    """F.silu(gate) * up of gate_up's halves (a fast forward's SwiGLU on one gate/up GEMM's output) with
    autograd's bits, its gradient one [..., 2I] tensor written half by half by the same torch ops autograd runs
    (mul, `silu_backward`): no concatenation of the halves' gradients."""
    if gate_up.shape[-1] % 2:
        raise OperandError(f"silu_mul_packed_fast: gate_up {tuple(gate_up.shape)} has no two equal halves")
    if torch.is_grad_enabled() and gate_up.requires_grad:
        return _FastSiluMulPacked.apply(gate_up)
    gate, up = _halves(gate_up)
    return F.silu(gate) * up


def silu_mul_quantize_packed(gate_up: torch.Tensor, fmt: QuantFormat, *,
                             backend: str = "auto") -> tuple[torch.Tensor, Quantized]:
    """`silu_mul_quantize` of gate_up's halves (gate, then up, along the last dim: the one GEMM of a fused
    gate/up), the same bits. Its gradient is one [..., 2I] tensor, what that GEMM's backward reads: the halves
    as column views would cost autograd a concatenation of their gradients."""
    _check_fmt(fmt)
    if gate_up.shape[-1] % 2:
        raise OperandError(f"silu_mul_quantize_packed: gate_up {tuple(gate_up.shape)} has no two equal halves")
    return _apply(_SILU_MUL_PACKED, gate_up, None, None, fmt, backend)


def add_rms_norm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float,
                 fmt: QuantFormat | None = None, *, backend: str = "auto",
                 ) -> tuple[torch.Tensor, torch.Tensor, Quantized | None]:
    """(x + y, invariant.rms_norm(x + y, weight, eps), with `fmt` quantize_rows_1xG of that norm, else None): a
    residual add and the RMSNorm after it. One kernel where `backend` fuses and no autograd is recorded;
    otherwise the separate ops (differentiable), which give the same bits."""
    if backend not in BACKENDS:
        raise OperandError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if y.shape != x.shape or x.dtype != y.dtype:
        raise OperandError(f"add_rms_norm: x {tuple(x.shape)} {x.dtype} and y {tuple(y.shape)} {y.dtype} differ")
    if weight.shape != (x.shape[-1],):
        raise OperandError(f"add_rms_norm: weight {tuple(weight.shape)} does not fit x {tuple(x.shape)}")
    if fmt is not None:
        _check_fmt(fmt)
    fused = backend == "triton" or (backend == "auto" and x.is_cuda)
    recording = torch.is_grad_enabled() and (x.requires_grad or y.requires_grad or weight.requires_grad)
    if fused and not recording:
        from precision_engine.numerics import triton_fused_quant

        if fmt is None or triton_fused_quant.rms_norm_fits(x.shape[-1], fmt):
            s, h, q = triton_fused_quant.add_rms_norm(_rows(x), _rows(y), weight, eps, fmt)
            return s.reshape(x.shape), h.reshape(x.shape), q
    s = x + y
    if fmt is None:
        return s, invariant.rms_norm(s, weight, eps), None
    return (s, *rms_norm_quantize(s, weight, eps, fmt, backend=backend))


def rms_norm_quantize_reference(x, weight, eps, fmt):
    """The unfused pair the fused RMSNorm kernel equals: invariant.rms_norm, then quantize_rows_1xG."""
    y = invariant.rms_norm(x, weight, eps)
    return y, quantize_rows_1xG(y, fmt)


def silu_mul_quantize_reference(gate, up, fmt):
    """The unfused pair the fused SiLU-mul kernel equals: invariant.silu(gate) * up, then quantize_rows_1xG."""
    h = invariant.silu(gate) * up
    return h, quantize_rows_1xG(h, fmt)


def _rms_norm_forward(x, weight, eps, fmt, fused):
    x2 = _rows(x)
    if fused:
        from precision_engine.numerics import triton_fused_quant

        fused = triton_fused_quant.rms_norm_fits(x.shape[-1], fmt)
    if fused:
        y, q = triton_fused_quant.rms_norm_quantize(x2, weight, eps, fmt)
    else:
        y, q = rms_norm_quantize_reference(x2, weight, eps, fmt)
    return y.reshape(x.shape), q


def _silu_mul_forward(gate, up, eps, fmt, fused):
    g2, u2 = _rows(gate), _rows(up)
    if fused:
        from precision_engine.numerics import triton_fused_quant

        h, q = triton_fused_quant.silu_mul_quantize(g2, u2, fmt)
    else:
        h, q = silu_mul_quantize_reference(g2, u2, fmt)
    return h.reshape(gate.shape), q


def _silu_mul_op(gate, up, eps):
    return invariant.silu(gate) * up


def _silu_mul_backward(gate, up, eps, grad, wanted, fused):
    """(d_gate, d_up), None where not `wanted`: `triton_fused_quant.silu_mul_backward` where the forward was
    fused, else the torch ops autograd runs through `_silu_mul_op` (mul's backward, then `invariant.silu`'s);
    the same bits."""
    if not fused:
        d_up = grad * invariant.silu(gate) if wanted[1] else None
        return (invariant.silu_backward(gate, grad * up) if wanted[0] else None), d_up
    d_gate, d_up = (torch.empty_like(t, memory_format=torch.contiguous_format) if w else None
                    for t, w in zip((gate, up), wanted))
    _silu_mul_kernel_backward(gate, up, grad, d_gate, d_up)
    return d_gate, d_up


def _silu_mul_kernel_backward(gate, up, grad, d_gate, d_up):
    """`triton_fused_quant.silu_mul_backward` on [..., I] tensors (row views of them), into d_gate / d_up."""
    from precision_engine.numerics import triton_fused_quant

    triton_fused_quant.silu_mul_backward(_rows(gate), _rows(up), _rows(grad), *(
        None if d is None else d.view(-1, d.shape[-1]) for d in (d_gate, d_up)))


def _halves(gate_up):
    half = gate_up.shape[-1] // 2
    return gate_up[..., :half], gate_up[..., half:]


def _silu_mul_packed_forward(gate_up, _, eps, fmt, fused):
    return _silu_mul_forward(*_halves(gate_up), eps, fmt, fused)


def _silu_mul_packed_backward(gate_up, _, eps, grad, wanted, fused):
    """d(gate_up), the halves' gradients side by side in one buffer (written there by the kernel, else
    concatenated, as a split's backward does: -0 stays -0)."""
    if not fused:
        return torch.cat(_silu_mul_backward(*_halves(gate_up), eps, grad, (True, True), False), dim=-1), None
    d = torch.empty(gate_up.shape, dtype=gate_up.dtype, device=gate_up.device)
    _silu_mul_kernel_backward(*_halves(gate_up), grad, *_halves(d))
    return d, None


def _rms_norm_backward(x, weight, eps, grad, wanted, fused):
    """The unfused norm's own backward: `triton_norm.rms_norm_backward` on the GPU, autograd through
    invariant.rms_norm's torch ops elsewhere."""
    if x.is_cuda:
        from precision_engine.numerics.triton_norm import rms_norm_backward

        return rms_norm_backward(x, weight, eps, grad)
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(w) for t, w in zip((x, weight), wanted)]
        grads = iter(torch.autograd.grad(invariant.rms_norm(*leaves, eps), [t for t in leaves if t.requires_grad],
                                         grad))
    return tuple(next(grads) if w else None for w in wanted)


class _Op(NamedTuple):
    """A fused producer: its forward (fused kernel or composed reference) and its backward, (a, b, eps, dy,
    wanted, fused) -> the inputs' gradients, the unfused op's bits."""

    forward: Callable
    backward: Callable


_RMS_NORM = _Op(_rms_norm_forward, _rms_norm_backward)
_SILU_MUL = _Op(_silu_mul_forward, _silu_mul_backward)
_SILU_MUL_PACKED = _Op(_silu_mul_packed_forward, _silu_mul_packed_backward)


def _apply(op, a, b, eps, fmt, backend):
    if backend not in BACKENDS:
        raise OperandError(f"backend must be one of {BACKENDS}, got {backend!r}")
    fused = backend == "triton" or (backend == "auto" and a.is_cuda)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (a, b)):
        out, data, scale = _Fused.apply(a, b, op, eps, fmt, fused)
        return out, Quantized(data, scale, fmt)
    return op.forward(a, b, eps, fmt, fused)


class _Fused(torch.autograd.Function):
    """Forward: the fused kernel (or the composed reference). Backward: the op's, from the saved inputs (a
    kernel, or the unfused op's own backward; the same bits). The FP8 data and scales are outputs without a
    gradient."""

    @staticmethod
    def forward(ctx, a, b, op, eps, fmt, fused):
        out, q = op.forward(a, b, eps, fmt, fused)
        ctx.op, ctx.eps, ctx.fused = op, eps, fused
        ctx.save_for_backward(a, b)
        ctx.mark_non_differentiable(q.data, q.scale)
        return out, q.data, q.scale

    @staticmethod
    def backward(ctx, grad_out, _grad_data, _grad_scale):
        a, b = (None if t is None else t.detach() for t in ctx.saved_tensors)  # Triton's interpreter refuses leaves
        grads = ctx.op.backward(a, b, ctx.eps, grad_out, ctx.needs_input_grad[:2], ctx.fused)
        return (*grads, None, None, None, None)


class _SiluMul(torch.autograd.Function):
    """`silu_mul`: the ops forward, `_silu_mul_backward` backward."""

    @staticmethod
    def forward(ctx, gate, up, fused):
        ctx.fused = fused
        ctx.save_for_backward(gate, up)
        return _silu_mul_op(gate, up, None)

    @staticmethod
    def backward(ctx, grad):
        gate, up = (t.detach() for t in ctx.saved_tensors)
        return (*_silu_mul_backward(gate, up, None, grad, ctx.needs_input_grad[:2], ctx.fused), None)


class _FastSiluMulPacked(torch.autograd.Function):
    """`silu_mul_packed_fast`: mul's backward and silu's, as autograd runs them, into the halves of one buffer."""

    @staticmethod
    def forward(ctx, gate_up):
        gate, up = _halves(gate_up)
        s = F.silu(gate)
        ctx.save_for_backward(gate_up, s)
        return s * up

    @staticmethod
    def backward(ctx, grad):
        gate_up, s = ctx.saved_tensors
        gate, up = _halves(gate_up)
        if torch.compiler.is_compiling():  # no out= into views there; the compiler places the halves itself
            return torch.cat([torch.ops.aten.silu_backward(grad * up, gate), grad * s], dim=-1)
        d = torch.empty(gate_up.shape, dtype=gate_up.dtype, device=gate_up.device)
        d_gate, d_up = _halves(d)
        torch.mul(grad, s, out=d_up)
        torch.ops.aten.silu_backward.grad_input(grad * up, gate, grad_input=d_gate)
        return d


def _check_fmt(fmt: QuantFormat) -> None:
    if not fmt.is_quantized or fmt.granularity is not Granularity.GROUP or fmt.axis is not Axis.K:
        raise OperandError(f"fused activation quantization needs a 1xG FP8 format (axis=k), got {fmt.describe()}")
    if not (fmt.group and fmt.group > 0):
        raise OperandError("group granularity needs a positive group size")


def _rows(t: torch.Tensor) -> torch.Tensor:
    """[..., K] as [tokens, K] with unit stride along K (the kernels' layout)."""
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()
