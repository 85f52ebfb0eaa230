"""Triton helpers that give the GPU's arithmetic in Triton's CPU interpreter too, so the interpreter tests check
the GPU's bits: a rounding to 16-bit floats that is round-to-nearest-even on both (`_round`), one the compiler
cannot fold into the arithmetic around it (`_round_opaque`), and 16-bit tensor-core operands (`_mma_operand`).
Shared by the batch-invariant kernels (`triton_linear`, `triton_norm`, `triton_rope`, `triton_attention`) and the
fused producers (`triton_fused_quant`)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _mma_operand(x, INTERPRET: tl.constexpr):
    """Triton's CPU interpreter multiplies bf16 tiles as raw uint16 (triton 3.9): there, and only there, the
    tile goes to the dot in fp32, which holds every bf16 product exactly, as the tensor cores do."""
    if INTERPRET:
        y = x.to(tl.float32)
    else:
        y = x
    return y


@triton.jit
def _round(x, dtype: tl.constexpr, INTERPRET: tl.constexpr):
    """fp32 -> dtype, round to nearest even (the GPU's cvt.rn). The interpreter's fp32 -> bf16 cast truncates
    or mis-rounds (triton 3.9), so there the rounding is done on the bits, as torch does it."""
    if dtype == tl.float32:
        y = x
    elif INTERPRET:
        if dtype == tl.bfloat16:
            u = x.to(tl.uint32, bitcast=True)
            bits = tl.where(x != x, 0x7FC0, (u + 0x7FFF + ((u >> 16) & 1)) >> 16)
            y = bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)
        else:
            y = x.to(dtype)
    else:
        y = x.to(dtype)
    return y


@triton.jit
def _round_opaque(x, dtype: tl.constexpr, INTERPRET: tl.constexpr):
    """fp32 -> bf16/fp16, round to nearest even, as one cvt.rn the compiler cannot fold into the surrounding
    arithmetic (`_round` in the interpreter, which has no inline PTX)."""
    if INTERPRET:
        y = _round(x, dtype, INTERPRET)
    elif dtype == tl.bfloat16:
        y = tl.inline_asm_elementwise("cvt.rn.bf16.f32 $0, $1;", "=h,r", [x], dtype=tl.bfloat16, is_pure=True,
                                      pack=1)
    else:
        y = tl.inline_asm_elementwise("cvt.rn.f16.f32 $0, $1;", "=h,r", [x], dtype=tl.float16, is_pure=True,
                                      pack=1)
    return y
