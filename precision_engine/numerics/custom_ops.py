"""The GPU launches of an FP8 linear as torch custom ops, so torch.compile traces its steps without graph breaks.

Dynamo cannot trace DeepGEMM's or pinned cuBLAS's pybind launches, the Gluon kernels, or the Triton launch
wrappers (their cached launch arguments): on an H200 one Fp8Linear fwd+bwd broke into 7-8 graphs, and
`fullgraph=True` refused (nineteenth session, BENCHMARKS.md). While torch.compile traces, the quantizers
(`quantize`), `gemm.fp8_gemm` and `gemm.transpose_operand` call ops `precision_engine::*` instead (`routes`, and
the call wrappers here). Each is one opaque node whose fake (here) gives its outputs' shapes, dtypes and
strides; its body is the eager call itself, defined beside it in `quantize` / `gemm` (which import this module,
not the reverse), so a compiled step launches the eager kernels and gives the eager bits. The CPU's pure-torch
kernels cross as ops too: traced, inductor fused the GEMM's bf16 output rounding into the bias add after it.

A format crosses the op boundary as a string (`format_key`): op schemas take tensors and scalars only.
"""

from __future__ import annotations

import functools

import torch

from precision_engine.numerics.contract import (Quantized, block_buffers, blocks_t_buffers, fp8_dtype, rows_buffers,
                                                tokens_buffers)
from precision_engine.numerics.formats import Axis, DType, Granularity, QuantFormat, ScaleKind


def routes() -> bool:
    """Whether a launch goes through its custom op: while torch.compile traces, on any device."""
    return torch.compiler.is_compiling()


def format_key(fmt: QuantFormat) -> str:
    """`fmt` as the string an op takes: dtype, granularity, group, block, axis and scale kind."""
    block = "x".join(map(str, fmt.block)) if fmt.block else ""
    return "|".join((fmt.dtype.value, fmt.granularity.value, str(fmt.group or ""), block, fmt.axis.value,
                     fmt.scale.value))


@functools.cache
def parse_format(key: str) -> QuantFormat:
    """The QuantFormat `format_key` made `key` from."""
    dtype, granularity, group, block, axis, scale = key.split("|")
    return QuantFormat(DType(dtype), Granularity(granularity), group=int(group) if group else None,
                       block=tuple(int(b) for b in block.split("x")) if block else None, axis=Axis(axis),
                       scale=ScaleKind(scale))


# ------------------------------------------------------------------------------------- what callers call


def quantize(kind: str, x: torch.Tensor, fmt: QuantFormat) -> Quantized:
    """`quantize.eager_quantize(kind, x, fmt)` as one op."""
    data, scale = torch.ops.precision_engine.quantize(x, kind, format_key(fmt))
    return Quantized(data, scale, fmt, tokens=x.shape[0] if kind == "tokens_t" else None)


def quantize_grad_output(x: torch.Tensor, rows_fmt: QuantFormat, tokens_fmt: QuantFormat
                         ) -> tuple[Quantized, Quantized]:
    """`quantize.quantize_rows_and_tokens_transposed` as one op."""
    rows_data, rows_scale, tokens_data, tokens_scale = torch.ops.precision_engine.quantize_grad_output(
        x, format_key(rows_fmt), format_key(tokens_fmt))
    return Quantized(rows_data, rows_scale, rows_fmt), Quantized(tokens_data, tokens_scale, tokens_fmt,
                                                                 tokens=x.shape[0])


def requantize_tokens_transposed(q: Quantized, fmt: QuantFormat) -> Quantized:
    """`quantize.requantize_tokens_transposed` as one op."""
    data, scale = torch.ops.precision_engine.requantize_tokens_transposed(q.data, q.scale, format_key(q.fmt),
                                                                          format_key(fmt))
    return Quantized(data, scale, fmt, tokens=q.data.shape[0])


def requantize_blocks_transposed(q: Quantized, fmt: QuantFormat) -> Quantized:
    """`quantize.requantize_blocks_transposed` as one op."""
    data, scale = torch.ops.precision_engine.requantize_blocks_transposed(q.data, q.scale, format_key(q.fmt),
                                                                          format_key(fmt))
    return Quantized(data, scale, fmt)


def quantize_blocks_stacked(weights: list[torch.Tensor], fmt: QuantFormat, transposed: bool
                            ) -> tuple[Quantized, Quantized | None]:
    """`quantize.quantize_blocks_stacked` as one op."""
    data, scale, data_t, scale_t = torch.ops.precision_engine.quantize_blocks_stacked(weights, format_key(fmt),
                                                                                     transposed)
    return Quantized(data, scale, fmt), Quantized(data_t, scale_t, fmt) if transposed else None


def transpose_operand(q: Quantized) -> Quantized:
    """`gemm.transpose_operand` as one op."""
    data, scale = torch.ops.precision_engine.transpose_operand(q.data, q.scale, format_key(q.fmt))
    return Quantized(data, scale, q.fmt)


def fp8_gemm(a: Quantized, b: Quantized, *, out_dtype: torch.dtype, kernel: str, gemm: str,
             batch_invariant: bool) -> torch.Tensor:
    """`gemm.fp8_gemm` as one op (`kernel`, `gemm`: the Kernel and Gemm values)."""
    return torch.ops.precision_engine.fp8_gemm(a.data, a.scale, format_key(a.fmt), b.data, b.scale,
                                               format_key(b.fmt), out_dtype, kernel, gemm, batch_invariant)


# ------------------------------------------------------------------------------------- the ops' fakes
# The ops themselves are defined beside their eager bodies (`quantize`, `gemm`), which import this module.


def fake_quantize(x, kind, fmt):
    q = _EMPTY[kind](x, parse_format(fmt))
    return q.data, q.scale


_EMPTY = {  # per `quantize` kind: its outputs, uninitialized (the contract's scale layouts)
    "tensor": lambda x, fmt: Quantized(x.new_empty(x.shape, dtype=fp8_dtype(fmt)),
                                       x.new_empty((), dtype=torch.float32), fmt),
    "channel": lambda x, fmt: Quantized(x.new_empty(x.shape, dtype=fp8_dtype(fmt)),
                                        x.new_empty((x.shape[0], 1), dtype=torch.float32), fmt),
    "rows": lambda x, fmt: rows_buffers(*x.shape, fmt, x.device),
    "blocks": lambda x, fmt: block_buffers(*x.shape, fmt, x.device),
    "tokens_t": lambda x, fmt: tokens_buffers(*x.shape, fmt, x.device),
}


def fake_quantize_blocks_stacked(weights, fmt, transposed):
    fmt, device = parse_format(fmt), weights[0].device
    n, k = sum(w.shape[0] for w in weights), weights[0].shape[1]
    wq = block_buffers(n, k, fmt, device)
    if not transposed:
        return wq.data, wq.scale, wq.data.new_empty(0), wq.scale.new_empty(0)
    wt = block_buffers(k, n, fmt, device)
    return wq.data, wq.scale, wt.data, wt.scale


def fake_quantize_grad_output(x, rows_fmt, tokens_fmt):
    rows = rows_buffers(*x.shape, parse_format(rows_fmt), x.device)
    tokens = tokens_buffers(*x.shape, parse_format(tokens_fmt), x.device)
    return rows.data, rows.scale, tokens.data, tokens.scale


def fake_requantize_tokens_transposed(data, scale, in_fmt, fmt):
    q = tokens_buffers(*data.shape, parse_format(fmt), data.device)
    return q.data, q.scale


def fake_requantize_blocks_transposed(data, scale, in_fmt, fmt):
    q = blocks_t_buffers(*data.shape, parse_format(fmt), data.device)
    return q.data, q.scale


def fake_transpose_operand(data, scale, fmt):
    return data.new_empty(data.shape[::-1]), scale.new_empty(scale.shape[::-1])


def fake_fp8_gemm(a, a_scale, a_fmt, b, b_scale, b_fmt, out_dtype, kernel, gemm, batch_invariant):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


__all__ = ["fake_fp8_gemm", "fake_quantize", "fake_quantize_blocks_stacked", "fake_quantize_grad_output",
           "fake_requantize_blocks_transposed", "fake_requantize_tokens_transposed", "fake_transpose_operand",
           "format_key", "fp8_gemm", "parse_format", "quantize", "quantize_blocks_stacked", "quantize_grad_output",
           "requantize_blocks_transposed", "requantize_tokens_transposed", "routes", "transpose_operand"]
