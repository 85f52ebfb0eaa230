"""Several FP8 linears that read the same input, run as one: q/k/v and gate/up of a decoder layer.

Why: each `Fp8Linear` quantizes its input and launches its own GEMMs, so q, k and v quantize the same
activation three times, and the narrow k/v GEMMs (1024 x 4096 on Llama-8B) are host-bound on the H200 (a
Triton launch costs ~75 us of host time there). Grouped, x is quantized once and each of the three GEMMs runs
once, against the parts' weights stacked by rows, W = [Wq; Wk; Wv]:

    fprop  y  = Q(x)[1x128] @ Q(W)[128x128]^T            split by columns into the parts' outputs
    dgrad  dx = Q([dyq dyk dyv])[1x128] @ Q(W)            the parts' contributions summed inside the GEMM
    wgrad  dW = Q(dy)[128x1]^T @ Q(x)[128x1]             split by rows into each Parameter's grad

Numerics: when every part's rows are a multiple of 128, the 128x128 blocks of Q(W) are the parts' own blocks
(the same bytes and scales), and dy's 1x128 groups along N never straddle two parts, so every GEMM multiplies
the operands the separate calls would. The sums can round differently: dgrad sums in FP32 in one GEMM where
the separate backward adds three BF16 dx. A part's row still has the same bits at any M, and the engine's
decode and the trainer's forward both run this path, so on-policy logprobs stay bitwise equal; on the CPU the
forward's reference kernel is exact, and grouped equals separate bitwise. Parts whose rows would straddle a
block, and parts with hooks (FSDP2's unshard and verify's layer recorder act in a module's own call only), run
their own forwards instead.

Caches: each part's weight is quantized straight into its rows of the stacked Q(W) (no concatenation per
weight version; a part's still-current Q(W) is copied there instead, so bytes pinned by `load_quantized` are
the bytes multiplied), kept on the first part as a plain attribute: no registered module, so state_dict,
parameter names, export and weight sync are untouched. Each part then holds its rows of the stack as its Q(W),
so the bytes exist once, and the decode CUDA graph's refresh, which copies a new version into the Q(W) it
captured, writes into the very stack the graph reads. When any part's Q(W) is no longer the stacked rows (a
new weight version, `invalidate_weight_cache()` / `rewrite.invalidate_weight_caches`, `load_quantized`), the
next call rebuilds the stack. A training forward captured into a CUDA graph quantizes each part into a new
stack inside the graph instead, and leaves the cache alone (as `Fp8Linear` does: linear's module doc).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.modules import module as _module_hooks

from precision_engine.errors import OperandError
from precision_engine.numerics.contract import Quantized, capturing_cuda_graph, part_views
from precision_engine.numerics.gemm import transpose_operand
from precision_engine.numerics.linear import Fp8Linear, fp8_linear, fresh_quantized_weights
from precision_engine.numerics.quantize import block_buffers, quantize_blocks_stacked


def shares_one_gemm(parts: Sequence[nn.Module]) -> bool:
    """Whether `fp8_linear_group` runs `parts` as one GEMM: two or more distinct Fp8Linear modules with equal
    (spec, numerics), in_features and weight device, a bias on all or none, rows in whole weight blocks, and
    no module hooks (which fire only when a module is called)."""
    if len(parts) < 2 or len({id(p) for p in parts}) != len(parts):
        return False
    if not all(isinstance(p, Fp8Linear) for p in parts):
        return False
    first = parts[0]
    block_rows = first.spec.weight.block[0]
    return all(
        p.spec == first.spec and p.numerics == first.numerics and p.in_features == first.in_features
        and p.weight.device == first.weight.device and (p.bias is None) == (first.bias is None)
        and p.out_features % block_rows == 0 and not hooked(p)
        for p in parts
    )


def fp8_linear_group(
    parts: Sequence[Fp8Linear], x: torch.Tensor, *, x_quantized: Quantized | None = None, stacked: bool = False,
) -> tuple[torch.Tensor, ...] | torch.Tensor:
    """(part(x) for each part), one GEMM each for forward, dgrad and wgrad when `shares_one_gemm(parts)`,
    else each part's own forward. `x_quantized`: Q(x) in the parts' input format, made by the caller (a fused
    norm -> quant kernel), so x is not quantized again. The outputs are column views of one [..., sum N];
    `stacked` returns that tensor itself where there is one GEMM (for a reader that takes the parts side by
    side and hands back one gradient: `fused_quant.silu_mul_quantize_packed`)."""
    if not all(isinstance(p, Fp8Linear) for p in parts):
        raise OperandError(f"fp8_linear_group takes Fp8Linear parts, got {[type(p).__name__ for p in parts]}")
    if not shares_one_gemm(parts):
        return tuple(p(x, x_quantized=x_quantized) for p in parts)
    first = parts[0]
    recording = torch.is_grad_enabled() and (x.requires_grad or any(p.weight.requires_grad for p in parts))
    fresh = recording and capturing_cuda_graph()  # a training capture quantizes inside the graph (linear's doc)
    wq, wt = _stacked_weights(parts, dgrad=first._dgrad_in_fp8(), fresh=fresh)
    y = fp8_linear(x, wq, wt, (first.spec, first.numerics), tuple(p.weight for p in parts),
                   tuple(p.bias for p in parts), x_quantized=x_quantized)
    return y if stacked else tuple(y.split([p.out_features for p in parts], dim=-1))


def _stacked_weights(parts: Sequence[Fp8Linear], *, dgrad: bool, fresh: bool = False
                     ) -> tuple[Quantized, Quantized | None]:
    """Q(W) of the stacked weight (and Q(W)^T for an FP8 dgrad), cached on the first part (module doc); `fresh`:
    each part's current weight quantized into new buffers, no cache read or written (a CUDA graph capture)."""
    if torch.compiler.is_compiling():  # as Fp8Linear: quantized inside the graph, no Python-side cache
        return quantize_blocks_stacked([p.weight.detach() for p in parts], parts[0].spec.weight, transposed=dgrad)
    if fresh:
        return fresh_quantized_weights(parts, dgrad)
    first = parts[0]
    cache = first._group_cache
    if cache is None or len(cache[0]) != len(parts) or not all(
            p._holds_quantized_weight(view) for p, view in zip(parts, cache[0])):
        with torch.inference_mode(False):  # the training step saves these for backward (see quantized_weight)
            fmt, device = first.spec.weight, first.weight.device
            rows = [p.out_features for p in parts]
            n, k = sum(rows), first.in_features
            wq = block_buffers(n, k, fmt, device)
            wt = block_buffers(k, n, fmt, device) if dgrad else None
            row_views = part_views(wq, rows, 0)
            column_views = part_views(wt, rows, 1) if dgrad else [None] * len(parts)
            for part, view, view_t in zip(parts, row_views, column_views):
                part._quantize_weight_into(view, view_t)
        cache = first._group_cache = [row_views, wq, wt]
    if dgrad and cache[2] is None:
        cache[2] = transpose_operand(cache[1])
    return cache[1], cache[2]


def hooked(module: nn.Module) -> bool:
    """Any hook `nn.Module.__call__` would run for `module` (its own or global): the condition torch itself
    checks before its hook-free fast path."""
    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks
        or _module_hooks._global_forward_hooks or _module_hooks._global_forward_pre_hooks
        or _module_hooks._global_backward_hooks or _module_hooks._global_backward_pre_hooks
    )


__all__ = ["fp8_linear_group", "shares_one_gemm"]
