"""FP8 quantizers: the single, exact statement of the engine's numerics contract.

Every phase (training forward/backward, rollout, weight export) calls these functions, so the same input gives
the same bytes everywhere. The pure-torch reference below *is* the specification; the Triton kernels in
`triton_quant` reproduce it bit for bit (tested on raw bytes and scales, in Triton's interpreter on the CPU and
on the GPU).

Contract, per group of elements that share one scale (a group is a tensor, a row, a 1xG run along K, a Gx1 run
along tokens or an RxC block, depending on the format):

1. ``x32 = x.float()`` (exact for bf16/fp16 inputs); ``amax = max|x32|`` over the group. Elements outside the
   tensor (partial edge groups/blocks, token padding) count as 0.
2. ``scale = max(amax, AMAX_EPS) / fmax`` in fp32 with IEEE round-to-nearest division (fmax 448 for E4M3,
   57344 for E5M2; AMAX_EPS = 1e-10 rounded to fp32), so all-zero groups get a tiny finite scale and never NaN.
   With ``ScaleKind.POW2`` the fp32 quotient is rounded *up* to a power of two (UE8M0): it is exact, because
   the quotient of an fp32 amax by fmax can never round down onto a power of two (proof: amax is fp32 and
   fmax * 2**k is exactly representable, so they differ by at least one ulp of amax, more than half an ulp of
   the quotient).
3. If amax is not finite (the group holds NaN or +-Inf) the scale is NaN, so NaN flows to every element of the
   group and to whatever consumes it: never silently saturated or zeroed. `check_finite` then decides, per the
   policy's ``numerics.nonfinite``, whether that raises (`NonFiniteError`), warns or propagates.
4. ``q = fp8_rne(clamp(x32 / scale, -fmax, fmax))``: IEEE fp32 *division* (not multiplication by a
   reciprocal), saturation to +-fmax, then one round-to-nearest-even cast to FP8, FP8 subnormals included.
   The sign of zero is kept (``-1e-30`` quantizes to ``-0``).
5. ``scale`` is the *dequant multiplier*: ``dequantize(q) = q.float() * scale`` in fp32 (SGLang calls it
   ``weight_scale_inv``). One edge of fp32's range: with POW2 scales, ``|x| >= 248 * 2**120`` (~3.2965e38) in
   E4M3 and ``|x| >= 1.875 * 2**127`` (~3.1901e38) in E5M2 dequantize to +-Inf, since the scale rounds up to
   2**120 (2**113) and ``x / scale`` rounds up to 256 (32768) on the grid; the bytes are the contract's, only the
   fp32 product overflows.

Who else produces these bytes (measured on the CPU, IEEE arithmetic, bf16 input): compressed-tensors'
FP8_BLOCK (fp32 scales) and SGLang's column-major Triton group kernel equal these quantizers in 100% of bytes
and scales. verl's weight-sync kernel (``blockwise_cast_to_fp8``), DeepGEMM's, vLLM's ``per_block``, SGLang's
row-major Triton kernel and torchao's reference multiply by a reciprocal and match 99.90-99.99% of the bytes;
on an H200 their scales also differ from ours in the last bit in 30-55% of blocks (Triton's ``/`` is an
approximate division there; ``tl.math.div_rn`` is exact). SGLang's CUDA activation quantizer multiplies as well
(``scale = amax * (1/448)``, ``q = x * (448/amax)``), so it is not byte-identical either. Dequantization
(step 5) equals transformers', SGLang's and compressed-tensors' bitwise. Inside this engine every producer
calls this module, so training, rollout and export agree exactly.

Scale layouts (what ``torch._scaled_mm`` and SGLang's loader consume without copies):

=========================  ============  ===============================================================
format                     data          scale
=========================  ============  ===============================================================
tensor                     as input      shape ``[]``
channel on [R, C]          [R, C]        [R, 1]
group axis=k (1xG) [M, K]  [M, K]        logical [M, ceil(K/G)], strides (1, M) (M-major)
block (R, C) on [N, K]     [N, K]        [ceil(N/R), ceil(K/C)], contiguous
group axis=tokens [M, C]   [C, M_pad]    logical [C, M_pad/G], strides (1, C); data = x^T, M_pad = M
                                         rounded up to G with zero padding (the wgrad operand layout)
=========================  ============  ===============================================================

Activations with leading dims are flattened to 2-D ``[tokens, K]``. ``backend="auto"`` runs the Triton
kernels for CUDA tensors and the reference otherwise; ``"reference"``/``"triton"`` force one (``"triton"`` on
the CPU needs ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace

import torch

from precision_engine.errors import NonFiniteError, OperandError, UnsupportedError
from precision_engine.numerics import custom_ops
from precision_engine.numerics.contract import (  # noqa: F401 (re-exported: the contract's public names)
    COMPUTE_TORCH_DTYPE,
    FP8_TORCH_DTYPE,
    QUANTIZABLE_DTYPES,
    Quantized,
    block_buffers,
    capturing_cuda_graph,
    cast_to_fp8,
    fp8_dtype,
    part_views,
    scale_from_amax,
)
from precision_engine.numerics.formats import Axis, Granularity, QuantFormat
from precision_engine.numerics.specs import NonFinite

BACKENDS = ("auto", "reference", "triton")


# ----------------------------------------------------------------------------------------------- public API


def quantize(x: torch.Tensor, fmt: QuantFormat, *, backend: str = "auto") -> Quantized:
    """Quantize `x` per `fmt` (any granularity). Leading dims of activations are flattened to 2-D."""
    _check_fp8(fmt)
    g = fmt.granularity
    if g is Granularity.TENSOR:
        return _dispatch("tensor", x, fmt, backend)
    if g is Granularity.CHANNEL:
        return _dispatch("channel", _as_2d(x), fmt, backend)
    if g is Granularity.BLOCK:
        return quantize_blocks(x, fmt, backend=backend)
    if fmt.axis is Axis.TOKENS:
        return quantize_tokens_transposed(x, fmt, backend=backend)
    return quantize_rows_1xG(x, fmt, backend=backend)


def quantize_rows_1xG(x: torch.Tensor, fmt: QuantFormat, *, backend: str = "auto") -> Quantized:
    """1xG groups along K (activations, grad outputs): data [M, K], scale [M, ceil(K/G)] M-major."""
    _check_fp8(fmt, Granularity.GROUP)
    if fmt.axis is not Axis.K:
        raise OperandError(f"quantize_rows_1xG needs axis=k, got {fmt.axis.value}")
    return _dispatch("rows", _as_2d(x), fmt, backend)


def quantize_blocks(w: torch.Tensor, fmt: QuantFormat, *, backend: str = "auto",
                    out: Quantized | None = None, out_t: Quantized | None = None) -> Quantized:
    """RxC blocks (weights, 128x128): data [N, K], scale [ceil(N/R), ceil(K/C)] contiguous. `out`: buffers of
    those shapes, FP8 and float32 with unit column stride, to write into (a part's rows of a stacked weight:
    `fused_linear`); returned. `out_t`: buffers of the transposed shapes, [K, N] and [ceil(K/C), ceil(N/R)],
    that receive Q(W)^T in the same pass (dgrad's operand, the bytes `gemm.transpose_operand` would give)."""
    _check_fp8(fmt, Granularity.BLOCK)
    if w.dim() != 2:
        raise OperandError(f"block quantization needs a 2-D weight, got shape {tuple(w.shape)}")
    if out is None and out_t is None:
        return _dispatch("blocks", w, fmt, backend)
    scale_shape = tuple(-(-n // b) for n, b in zip(w.shape, fmt.block))
    for name, buffers, shapes in (("out", out, (tuple(w.shape), scale_shape)),
                                  ("out_t", out_t, (tuple(w.shape)[::-1], scale_shape[::-1]))):
        if buffers is not None:
            _check_buffers(name, buffers, *shapes, fmt)
    w = _input(w)
    if _use_triton(w, backend):
        from precision_engine.numerics import triton_quant

        return triton_quant.quantize_blocks(w, fmt, out=out, out_t=out_t)
    q = _REFERENCE["blocks"](w, fmt)
    for buffers, data, scale in ((out, q.data, q.scale), (out_t, q.data.t(), q.scale.t())):
        if buffers is not None:
            buffers.data.copy_(data)
            buffers.scale.copy_(scale)
    return q if out is None else replace(out, fmt=fmt)


def quantize_blocks_stacked(weights: Sequence[torch.Tensor], fmt: QuantFormat, *, transposed: bool,
                            backend: str = "auto") -> tuple[Quantized, Quantized | None]:
    """(Q(W), with `transposed` Q(W)^T, else None) of the row stack of `weights` (one fused GEMM's parts, each in
    whole blocks of rows but the last), each part quantized straight into its rows and columns of the two
    buffers: a pass per part, no copy, the bits of `quantize_blocks` of the stack. What a forward quantizing its
    weights afresh (torch.compile, a CUDA-graph capture) runs."""
    if not weights or any(w.dim() != 2 or w.shape[1] != weights[0].shape[1] for w in weights):
        raise OperandError(f"quantize_blocks_stacked needs 2-D weights of one width, got "
                           f"{[tuple(w.shape) for w in weights]}")
    rows = [w.shape[0] for w in weights]
    if any(r % fmt.block[0] for r in rows[:-1]):
        raise OperandError(f"quantize_blocks_stacked: every part but the last needs whole {fmt.block[0]}-row "
                           f"blocks, got rows {rows}")
    if backend == "auto" and custom_ops.routes():
        return custom_ops.quantize_blocks_stacked(weights, fmt, transposed)
    n, k, device = sum(rows), weights[0].shape[1], weights[0].device
    wq = block_buffers(n, k, fmt, device)
    wt = block_buffers(k, n, fmt, device) if transposed else None
    for w, view, view_t in zip(weights, part_views(wq, rows, 0),
                               part_views(wt, rows, 1) if transposed else [None] * len(rows)):
        quantize_blocks(w, fmt, backend=backend, out=view, out_t=view_t)
    return wq, wt


def _check_buffers(name: str, buffers: Quantized, shape: tuple, scale_shape: tuple, fmt: QuantFormat) -> None:
    if (tuple(buffers.data.shape) != shape or tuple(buffers.scale.shape) != scale_shape
            or buffers.data.dtype != fp8_dtype(fmt) or buffers.scale.dtype != torch.float32
            or buffers.data.stride(-1) != 1 or buffers.scale.stride(-1) != 1):
        raise OperandError(
            f"quantize_blocks {name}= must be {fp8_dtype(fmt)} {shape} and float32 {scale_shape} with unit column "
            f"stride; got {buffers.data.dtype} {tuple(buffers.data.shape)} and {buffers.scale.dtype} "
            f"{tuple(buffers.scale.shape)}"
        )


def quantize_tokens_transposed(x: torch.Tensor, fmt: QuantFormat, *, backend: str = "auto") -> Quantized:
    """Gx1 groups along tokens (the wgrad operands): data = x^T as [C, M_pad], scale [C, M_pad/G] (1, C)."""
    _check_fp8(fmt, Granularity.GROUP)
    if fmt.axis is not Axis.TOKENS:
        raise OperandError(f"quantize_tokens_transposed needs axis=tokens, got {fmt.axis.value}")
    return _dispatch("tokens_t", _as_2d(x), fmt, backend)


def quantize_rows_and_tokens_transposed(
    x: torch.Tensor, rows_fmt: QuantFormat, tokens_fmt: QuantFormat, *, backend: str = "auto"
) -> tuple[Quantized, Quantized]:
    """(quantize_rows_1xG(x, rows_fmt), quantize_tokens_transposed(x, tokens_fmt)) from one read of x.

    The grad output feeds dgrad as 1xG groups along K and wgrad as Gx1 groups along tokens; on the GPU one
    launch runs both quantizers' programs side by side over each region of dy, so dy comes from memory once
    (`triton_quant._grad_output_kernel`), with the bytes of the two separate quantizers. Both layouts need their
    own division per element, so it saves the second read and a launch, not instructions: 4-9% faster than the
    two kernels on the H200 (bench/quant.py's "dy 1x128+tokens^T" rows, 2026-12-03). On Hopper with Triton 3.6
    and 128-wide groups, a TMA-fed kernel reads each tile of dy into shared memory once and quantizes it both
    ways from there (`gluon_grad_output`), with the same bytes.
    """
    _check_fp8(rows_fmt, Granularity.GROUP)
    _check_fp8(tokens_fmt, Granularity.GROUP)
    if rows_fmt.axis is not Axis.K or tokens_fmt.axis is not Axis.TOKENS:
        raise OperandError(
            f"need a 1xG (axis=k) and a Gx1 (axis=tokens) format, got {rows_fmt.describe()} and "
            f"{tokens_fmt.describe()}"
        )
    x = _input(_as_2d(x))
    if backend == "auto" and custom_ops.routes():
        return custom_ops.quantize_grad_output(x, rows_fmt, tokens_fmt)
    if _use_triton(x, backend):
        from precision_engine.numerics import gluon_grad_output, triton_quant

        if gluon_grad_output.runs(x, rows_fmt, tokens_fmt):  # the same bytes, TMA-fed (Hopper, Triton 3.6)
            return gluon_grad_output.quantize_rows_and_tokens_transposed(x, rows_fmt, tokens_fmt)
        return triton_quant.quantize_rows_and_tokens_transposed(x, rows_fmt, tokens_fmt)
    return _ref_rows(x, rows_fmt), _ref_tokens_t(x, tokens_fmt)


def requantize_tokens_transposed(
    q: Quantized, fmt: QuantFormat | None = None, *, backend: str = "auto"
) -> Quantized:
    """Tokens-transposed operand from a saved 1xG FP8 activation: quantize_tokens_transposed(dequantize(q)).

    Fused into one Triton kernel on the GPU (the tokens-transposed quantizer dequantizing as it loads, no fp32
    copy of the activation is materialised); on Hopper with Triton 3.6, one Gluon kernel with the same bytes in
    fewer instructions (`gluon_requant`). `fmt` defaults to q's dtype and scale kind with groups of the same
    size along tokens.
    """
    if q.fmt.granularity is not Granularity.GROUP or q.fmt.axis is not Axis.K:
        raise OperandError(f"requantize_tokens_transposed needs a 1xG operand, got {q.fmt.describe()}")
    if fmt is None:
        fmt = replace(q.fmt, axis=Axis.TOKENS)
    _check_fp8(fmt, Granularity.GROUP)
    if fmt.axis is not Axis.TOKENS:
        raise OperandError(f"requantize_tokens_transposed needs axis=tokens, got {fmt.axis.value}")
    if backend == "auto" and custom_ops.routes():
        return custom_ops.requantize_tokens_transposed(q, fmt)
    if _use_triton(q.data, backend):
        from precision_engine.numerics import gluon_requant, triton_quant

        if gluon_requant.runs(q, fmt):  # the same bytes in fewer instructions (Hopper, Triton 3.6)
            return gluon_requant.requantize_tokens_transposed(q, fmt)
        return triton_quant.requantize_tokens_transposed(q, fmt)
    return _REFERENCE["tokens_t"](dequantize(q), fmt)


def requantize_blocks_transposed(q: Quantized, fmt: QuantFormat, *, backend: str = "auto") -> Quantized:
    """x^T in RxC blocks from a saved 1xG FP8 activation q [M, C]: `quantize_blocks` of dequantize(q)^T, [C, M_pad]
    with the token columns zero-padded to whole groups as `tokens_buffers` pads the wgrad's other operand (M_pad =
    M rounded up to fmt's block along tokens), so the wgrad multiplies 1x128 by 128x128 (the fprop's GEMM form).
    The fp32 dequantized copy is exact; the block quantizer rounds it once.

    Fused into one Triton kernel on the GPU for 1x128 inputs and 128x128 blocks (the tokens re-quantizer's program
    with one scale a tile, dequantizing as it loads: no fp32 copy); on Hopper with Triton 3.6 and fp32 scales, the
    Gluon re-quantizer's program with one scale a tile (`gluon_requant`), the same bytes; other shapes take the
    composition above."""
    if q.fmt.granularity is not Granularity.GROUP or q.fmt.axis is not Axis.K:
        raise OperandError(f"requantize_blocks_transposed needs a 1xG operand, got {q.fmt.describe()}")
    _check_fp8(fmt, Granularity.BLOCK)
    if backend == "auto" and custom_ops.routes():
        return custom_ops.requantize_blocks_transposed(q, fmt)
    if _use_triton(q.data, backend):
        from precision_engine.numerics import gluon_requant, triton_quant

        if gluon_requant.runs_blocks(q, fmt):  # the same bytes, the Gluon program (Hopper, Triton 3.6)
            return gluon_requant.requantize_blocks_transposed(q, fmt)
        if triton_quant.requantizes_blocks(q, fmt):
            return triton_quant.requantize_blocks_transposed(q, fmt)
    m = q.data.shape[0]
    pad = -m % fmt.block[1]
    xt = torch.nn.functional.pad(dequantize(q), (0, 0, 0, pad)).t().contiguous()
    return quantize_blocks(xt, fmt, backend=backend)


def dequantize(q: Quantized, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """q.data * scale in fp32, then cast to `dtype`. A tokens-transposed operand comes back as x^T [C, M]."""
    data = q.data.float()
    fmt = q.fmt
    if fmt.granularity in (Granularity.TENSOR, Granularity.CHANNEL):
        out = data * q.scale
    elif fmt.granularity is Granularity.BLOCK:
        out = data * _expand(q.scale, fmt.block, data.shape)
    elif fmt.axis is Axis.K:
        out = data * _expand(q.scale, (1, fmt.group), data.shape)
    else:
        out = (data * _expand(q.scale, (1, fmt.group), data.shape))[:, : q.tokens]
    return out.to(dtype)


def check_finite(t: Quantized | torch.Tensor, policy_mode, name: str) -> None:
    """Apply the policy's `nonfinite` mode to a quantized operand (NaN scale = non-finite group) or a tensor.

    error: raise NonFiniteError; warn: warnings.warn; propagate: do nothing (no host sync either). error and
    warn read a count on the host, which a CUDA graph capture cannot replay: refused there (UnsupportedError).
    """
    mode = NonFinite(policy_mode)
    if mode is NonFinite.PROPAGATE:
        return
    if capturing_cuda_graph():
        raise UnsupportedError(
            f"{name}: numerics.nonfinite: {mode.value} checks each call's values on the host, which a CUDA graph "
            "cannot replay (hint: capture with nonfinite: propagate, or run the step eagerly)"
        )
    values = t.scale if isinstance(t, Quantized) else t
    bad = int((~torch.isfinite(values)).sum())
    if bad == 0:
        return
    what = "scale groups" if isinstance(t, Quantized) else "elements"
    message = f"{name}: {bad} of {values.numel()} {what} are NaN/Inf"
    if mode is NonFinite.ERROR:
        raise NonFiniteError(message + " (policy numerics.nonfinite: error)")
    warnings.warn(message, RuntimeWarning, stacklevel=2)


# -------------------------------------------------------------------------------------------- reference


def _ref_tensor(x: torch.Tensor, fmt: QuantFormat) -> Quantized:
    x32 = x.float()
    scale = scale_from_amax(_amax(x32), fmt)
    return Quantized(cast_to_fp8(x32, scale, fmt), scale, fmt)


def _ref_channel(x: torch.Tensor, fmt: QuantFormat) -> Quantized:
    x32 = x.float()
    scale = scale_from_amax(_amax(x32, dim=1, keepdim=True), fmt)
    return Quantized(cast_to_fp8(x32, scale, fmt), scale, fmt)


def _ref_rows(x: torch.Tensor, fmt: QuantFormat) -> Quantized:
    m, k = x.shape
    g = fmt.group
    groups = -(-k // g)
    x32 = torch.nn.functional.pad(x.float(), (0, groups * g - k)).view(m, groups, g)
    scale = scale_from_amax(_amax(x32, dim=2), fmt)  # [M, groups]
    data = cast_to_fp8(x32, scale[:, :, None], fmt).view(m, groups * g)[:, :k].contiguous()
    return Quantized(data, _m_major(scale), fmt)


def _ref_blocks(w: torch.Tensor, fmt: QuantFormat) -> Quantized:
    n, k = w.shape
    br, bc = fmt.block
    nb, kb = -(-n // br), -(-k // bc)
    w32 = torch.nn.functional.pad(w.float(), (0, kb * bc - k, 0, nb * br - n)).view(nb, br, kb, bc)
    scale = scale_from_amax(_amax(w32, dim=(1, 3)), fmt)  # [nb, kb]
    data = cast_to_fp8(w32, scale[:, None, :, None], fmt).view(nb * br, kb * bc)[:n, :k].contiguous()
    return Quantized(data, scale.contiguous(), fmt)


def _ref_tokens_t(x: torch.Tensor, fmt: QuantFormat) -> Quantized:
    m, c = x.shape
    g = fmt.group
    m_pad = -(-m // g) * g
    xt32 = torch.nn.functional.pad(x.float(), (0, 0, 0, m_pad - m)).t().contiguous().view(c, m_pad // g, g)
    scale = scale_from_amax(_amax(xt32, dim=2), fmt)  # [C, M_pad/G]
    data = cast_to_fp8(xt32, scale[:, :, None], fmt).view(c, m_pad)
    return Quantized(data, _m_major(scale), fmt, tokens=m)


_REFERENCE = {
    "tensor": _ref_tensor,
    "channel": _ref_channel,
    "rows": _ref_rows,
    "blocks": _ref_blocks,
    "tokens_t": _ref_tokens_t,
}


# -------------------------------------------------------------------------------------------- helpers


def _dispatch(kind: str, x: torch.Tensor, fmt: QuantFormat, backend: str) -> Quantized:
    x = _input(x)
    if backend == "auto" and custom_ops.routes():
        return custom_ops.quantize(kind, x, fmt)
    return eager_quantize(kind, x, fmt, backend)


def eager_quantize(kind: str, x: torch.Tensor, fmt: QuantFormat, backend: str = "auto") -> Quantized:
    """`kind`'s quantizer (a key of `_REFERENCE`) on x, launched now: the body of its custom op."""
    if _use_triton(x, backend):
        from precision_engine.numerics import triton_quant

        return triton_quant.QUANTIZERS[kind](x, fmt)
    return _REFERENCE[kind](x, fmt)


# -------------------------------------------------------------------- the custom ops (custom_ops' module doc)


@torch.library.custom_op("precision_engine::quantize", mutates_args=())
def _quantize_op(x: torch.Tensor, kind: str, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    q = eager_quantize(kind, x, custom_ops.parse_format(fmt))
    return q.data, q.scale


@torch.library.custom_op("precision_engine::quantize_grad_output", mutates_args=())
def _quantize_grad_output_op(x: torch.Tensor, rows_fmt: str, tokens_fmt: str
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    rows, tokens = quantize_rows_and_tokens_transposed(x, custom_ops.parse_format(rows_fmt),
                                                       custom_ops.parse_format(tokens_fmt))
    return rows.data, rows.scale, tokens.data, tokens.scale


@torch.library.custom_op("precision_engine::requantize_tokens_transposed", mutates_args=())
def _requantize_tokens_transposed_op(data: torch.Tensor, scale: torch.Tensor, in_fmt: str, fmt: str
                                     ) -> tuple[torch.Tensor, torch.Tensor]:
    q = requantize_tokens_transposed(Quantized(data, scale, custom_ops.parse_format(in_fmt)),
                                     custom_ops.parse_format(fmt))
    return q.data, q.scale


@torch.library.custom_op("precision_engine::requantize_blocks_transposed", mutates_args=())
def _requantize_blocks_transposed_op(data: torch.Tensor, scale: torch.Tensor, in_fmt: str, fmt: str
                                     ) -> tuple[torch.Tensor, torch.Tensor]:
    q = requantize_blocks_transposed(Quantized(data, scale, custom_ops.parse_format(in_fmt)),
                                     custom_ops.parse_format(fmt))
    return q.data, q.scale


@torch.library.custom_op("precision_engine::quantize_blocks_stacked", mutates_args=())
def _quantize_blocks_stacked_op(weights: list[torch.Tensor], fmt: str, transposed: bool
                                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q(W)^T's pair empty where not `transposed` (an op returns tensors only)."""
    wq, wt = quantize_blocks_stacked(weights, custom_ops.parse_format(fmt), transposed=transposed)
    wt_data, wt_scale = (wt.data, wt.scale) if wt is not None else (wq.data.new_empty(0), wq.scale.new_empty(0))
    return wq.data, wq.scale, wt_data, wt_scale


_quantize_op.register_fake(custom_ops.fake_quantize)
_quantize_blocks_stacked_op.register_fake(custom_ops.fake_quantize_blocks_stacked)
_quantize_grad_output_op.register_fake(custom_ops.fake_quantize_grad_output)
_requantize_tokens_transposed_op.register_fake(custom_ops.fake_requantize_tokens_transposed)
_requantize_blocks_transposed_op.register_fake(custom_ops.fake_requantize_blocks_transposed)


def _input(x: torch.Tensor) -> torch.Tensor:
    """x, checked, and detached: FP8 bytes have no gradient, and a graph through them would keep x alive."""
    if x.dtype not in QUANTIZABLE_DTYPES:
        raise OperandError(f"quantize needs a bf16/fp16/fp32 tensor, got {x.dtype} (the contract's fp32 step is "
                           "exact only for those; cast float64 to float32 first if its rounding is wanted)")
    return x.detach()


def _use_triton(x: torch.Tensor, backend: str) -> bool:
    if backend not in BACKENDS:
        raise OperandError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return backend == "triton" or (backend == "auto" and x.is_cuda)


def _check_fp8(fmt: QuantFormat, granularity: Granularity | None = None) -> None:
    if not fmt.is_quantized:
        raise OperandError(f"{fmt.describe()} is not an FP8 format")
    if granularity is not None and fmt.granularity is not granularity:
        raise OperandError(f"expected {granularity.value} granularity, got {fmt.describe()}")
    if fmt.granularity is Granularity.GROUP and not (fmt.group and fmt.group > 0):
        raise OperandError("group granularity needs a positive group size")
    if fmt.granularity is Granularity.BLOCK and not (fmt.block and min(fmt.block) > 0):
        raise OperandError("block granularity needs a positive block shape")


def _as_2d(x: torch.Tensor) -> torch.Tensor:
    if x.dim() == 2:
        return x
    if x.dim() < 2:
        return x.reshape(1, -1)
    return x.reshape(-1, x.shape[-1])


def _amax(x32: torch.Tensor, dim=None, keepdim: bool = False) -> torch.Tensor:
    """max |x| with NaN propagated (torch.amax propagates NaN); an empty tensor's amax is 0."""
    if dim is None:
        return x32.abs().amax() if x32.numel() else x32.new_zeros(())
    return x32.abs().amax(dim=dim, keepdim=keepdim)


def _m_major(scale: torch.Tensor) -> torch.Tensor:
    """[R, G] scales re-laid out with strides (1, R): the layout torch._scaled_mm reads for 1x128 operands."""
    r, g = scale.shape
    return scale.new_empty((g, r)).t().copy_(scale)


def _expand(scale: torch.Tensor, tile: tuple[int, int], shape: torch.Size) -> torch.Tensor:
    """Broadcast a per-tile scale grid over the data (partial edge tiles included)."""
    r, c = tile
    return scale.repeat_interleave(r, dim=0)[: shape[0]].repeat_interleave(c, dim=1)[:, : shape[1]]
