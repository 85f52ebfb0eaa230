"""The residual add fused into the RMSNorm after it (numerics/fused_quant.py `add_rms_norm`), bitwise against
the unfused ops: torch's x + y, then invariant.rms_norm of the sum (and its quantize_rows_1xG quantization).

Without CUDA the kernel runs in Triton's CPU interpreter at small shapes (the file takes ~6 s on one core):
- the sum equals torch's x + y, the norm triton_invariant.rms_norm of that sum (the same interpreter
  arithmetic; the CPU's torch ops sum the squares in another order, a last-bit difference in some rows), the
  FP8 half quantize_rows_1xG of the norm (bytes, scales, scale layout). The interpreter's fp32 -> fp8 cast
  misrounds (triton 3.9), so there the kernel rounds onto the FP8 grid first (EXACT_ROUND), as the 1xG
  quantizer's kernels do.
- M = 1, 3, 64 rows; hidden sizes 256, 200 (a ragged last group) and 67 (odd, one ragged group); bf16, fp16
  and fp32; leading dims and a strided y.
Inputs are fresh Gaussians with row magnitudes spanning ~1e-3..1e3 and y of x's size (the sums round), with
exact cancellations (x + y = +0) and one row cancelled whole (a zero norm, zero groups); no subnormal bf16 (the
interpreter converts those to fp32 wrongly, triton 3.9; the GPU tests run every bf16 value as x).
Full sizes run on the GPU: tests/numerics/gpu/test_fused_add_norm_gpu.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

pytest.importorskip("triton")

from precision_engine.errors import OperandError  # noqa: E402
from precision_engine.numerics import fused_quant as F  # noqa: E402
from precision_engine.numerics import invariant  # noqa: E402
from precision_engine.numerics import quantize as Q  # noqa: E402
from precision_engine.numerics.formats import DType, ScaleKind  # noqa: E402

from helpers import BASE, assert_bitwise, run_offline_compile  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ACT = BASE[2]  # e4m3 1x128
FMTS = [None, ACT, replace(ACT, dtype=DType.FLOAT8_E5M2, scale=ScaleKind.POW2), replace(ACT, group=32)]


def _pair(shape, seed, dtype=torch.bfloat16):
    """x, y with rows of one magnitude each (~1e-3..1e3), some elements cancelling exactly, row 0 whole when
    there are several rows."""
    gen = torch.Generator().manual_seed(seed)
    mag = torch.exp(torch.randn(*shape[:-1], 1, generator=gen) * 2.5)
    x = (torch.randn(shape, generator=gen) * mag).to(dtype)
    y = (torch.randn(shape, generator=gen) * mag).to(dtype)
    y.view(-1, shape[-1])[:, ::7] = -x.view(-1, shape[-1])[:, ::7]
    if x.numel() > shape[-1]:
        y.view(-1, shape[-1])[0] = -x.view(-1, shape[-1])[0]
    return x.to(DEVICE), y.to(DEVICE)


def _weight(h, seed=1, dtype=torch.bfloat16):
    return (1 + 0.2 * torch.randn(h, generator=torch.Generator().manual_seed(seed))).to(dtype).to(DEVICE)


def _bits(t):
    t = t.contiguous().cpu()
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def _on_cpu(q):
    return replace(q, data=q.data.cpu(), scale=q.scale.cpu())


def _assert_unfused_bits(x, y, w, eps, fmt, s, h, q):
    """s, h, q are torch's x + y, the RMSNorm kernel's norm of it and the 1xG quantizer's bytes of that."""
    from precision_engine.numerics import triton_invariant as TI

    ref_s = x + y
    assert s.shape == x.shape and h.shape == x.shape and s.dtype == x.dtype
    assert torch.equal(_bits(s), _bits(ref_s))
    assert torch.equal(_bits(h), _bits(TI.rms_norm(ref_s, w, eps)))
    if fmt is None:
        assert q is None
        return
    assert_bitwise(_on_cpu(q), Q.quantize_rows_1xG(h.cpu(), fmt, backend="reference"))


# Every format at 1 and 3 rows, a few at 64 (each 64-row case takes ~1 s in the interpreter).
CASES = [(m, h, fmt) for m in (1, 3) for h in (256, 200, 67) for fmt in FMTS] + [
    (64, 200, None), (64, 200, ACT), (64, 67, FMTS[3])]


@pytest.mark.parametrize("m,h,fmt", CASES, ids=lambda v: "norm-only" if v is None else str(v) if isinstance(v, int)
                         else v.describe())
def test_add_rms_norm_equals_the_unfused_ops(m, h, fmt):
    x, y = _pair((m, h), seed=m * h)
    w = _weight(h)
    _assert_unfused_bits(x, y, w, 1e-6, fmt, *F.add_rms_norm(x, y, w, 1e-6, fmt, backend="triton"))


@pytest.mark.parametrize("fmt", [None, ACT], ids=["norm-only", "e4m3-1x128"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_other_activation_dtypes(dtype, fmt):
    """fp16 rounds the fp32 sum to fp16 (torch's add); fp32 keeps it, with an fp32 norm."""
    x, y = _pair((5, 256), seed=3, dtype=dtype)
    w = _weight(256, dtype=dtype)
    _assert_unfused_bits(x, y, w, 1e-5, fmt, *F.add_rms_norm(x, y, w, 1e-5, fmt, backend="triton"))


def test_leading_dims_and_a_strided_y():
    """[B, T, H] activations, y a column half of a wider tensor (row stride 2H): the bits of contiguous rows."""
    x, both = _pair((2, 3, 256), seed=4)[0], _pair((2, 3, 512), seed=5)[1]
    y = both[..., 256:]
    assert y.stride(-2) == 512
    w = _weight(256)
    s, h, q = F.add_rms_norm(x, y, w, 1e-6, ACT, backend="triton")
    assert q.data.shape == (6, 256)
    _assert_unfused_bits(x, y.contiguous(), w, 1e-6, ACT, s, h, q)


def test_cpu_tensors_compose_the_unfused_ops_by_default():
    x, y = (t.cpu() for t in _pair((3, 256), seed=6))
    w = _weight(256).cpu()
    s, h, q = F.add_rms_norm(x, y, w, 1e-6, ACT)
    assert torch.equal(_bits(s), _bits(x + y)) and torch.equal(_bits(h), _bits(invariant.rms_norm(x + y, w, 1e-6)))
    assert_bitwise(q, Q.quantize_rows_1xG(h, ACT))


@pytest.mark.parametrize("fmt", [None, replace(ACT, group=48)], ids=["norm-only", "group-48"])
def test_autograd_and_untileable_groups_take_the_separate_ops(fmt):
    """With autograd recorded the separate ops run (same bits as the kernel; the gradients are those of
    x + y -> rms_norm); a group the RMSNorm kernel cannot tile composes the unfused kernels too."""
    x, y = _pair((4, 200), seed=7)
    w = _weight(200)
    fused = F.add_rms_norm(x, y, w, 1e-6, fmt, backend="triton")
    xg, yg, wg = (t.clone().requires_grad_() for t in (x, y, w))
    s, h, q = F.add_rms_norm(xg, yg, wg, 1e-6, fmt, backend="triton")
    assert torch.equal(_bits(s.detach()), _bits(fused[0])) and torch.equal(_bits(h.detach()), _bits(fused[1]))
    if fmt is not None:
        assert_bitwise(_on_cpu(q), _on_cpu(fused[2]))
        assert_bitwise(_on_cpu(fused[2]), Q.quantize_rows_1xG(fused[1].cpu(), fmt, backend="reference"))
    gs, gh = _pair((4, 200), seed=8)
    got = torch.autograd.grad((s, h), (xg, yg, wg), (gs, gh))
    xr, yr, wr = (t.clone().requires_grad_() for t in (x, y, w))
    sr = xr + yr
    ref = torch.autograd.grad((sr, invariant.rms_norm(sr, wr, 1e-6)), (xr, yr, wr), (gs, gh))
    assert all(torch.equal(_bits(a), _bits(b)) for a, b in zip(got, ref))


def test_empty_token_batch():
    x = torch.zeros(0, 256, dtype=torch.bfloat16, device=DEVICE)
    s, h, q = F.add_rms_norm(x, x, _weight(256), 1e-6, ACT, backend="triton")
    assert s.shape == h.shape == (0, 256) and q.data.shape == (0, 256) and q.scale.shape == (0, 2)


def test_bad_requests_are_refused():
    x, w = torch.randn(2, 128), torch.ones(128)
    with pytest.raises(OperandError, match="differ"):
        F.add_rms_norm(x, torch.randn(2, 64), w, 1e-6)
    with pytest.raises(OperandError, match="differ"):
        F.add_rms_norm(x, x.bfloat16(), w, 1e-6)
    with pytest.raises(OperandError, match="does not fit"):
        F.add_rms_norm(x, x, torch.ones(64), 1e-6)
    with pytest.raises(OperandError, match="1xG FP8 format"):
        F.add_rms_norm(x, x, w, 1e-6, BASE[3])
    with pytest.raises(OperandError, match="backend"):
        F.add_rms_norm(x, x, w, 1e-6, backend="cuda")


_COMPILE_FOR_SM90 = r'''
import re
from collections import Counter
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from precision_engine.numerics import triton_fused_quant as TF
from precision_engine.numerics import triton_norm as TN

def float_ops(fn, types, constexprs, num_warps):
    """The kernel's float instructions in PTX order, registers renamed by first use."""
    sig = dict(zip(fn.arg_names, types + ["constexpr"] * len(constexprs)))
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(types) if t.startswith("*")}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps}).asm["ptx"]
    ops, names = [], {}
    for line in ptx.splitlines():
        line = re.sub(r"^@!?%p\d+\s+", "", line.strip())
        op = line.split(" ")[0].split("\t")[0]
        if op.startswith(("bar.", "shfl.")) or any(t in op for t in (".f32", ".bf16", ".f16")):
            ops.append(re.sub(r"%[a-z]+\d+", lambda m: names.setdefault(m.group(0), f"%v{len(names)}"), line))
    return ops

def dataflow(ops):
    """Each instruction as the expression of what it computes, over the values it reads from outside `ops` (loads,
    parameters) left anonymous: the same multiset whatever order independent instructions, or the values a
    thread holds, come in."""
    exprs, defined = [], {}
    for op in ops:
        name, _, rest = op.partition(" ")
        operands = re.findall(r"%v\d+|[^\s,;{}\[\]|]+", rest)
        regs = [o for o in operands if o.startswith("%v")]
        if not regs:
            exprs.append(op.strip())
            continue
        expr = f"{name.strip()}(" + ",".join(defined.get(o, "in") if o.startswith("%v") else o
                                               for o in operands[1:]) + ")"
        defined[operands[0]] = expr
        exprs.append(expr)
    return Counter(exprs)

def after_first_barrier(ops):
    """What follows the first barrier (a run of bar.sync: the debug barrier compiles to two here)."""
    i = next(i for i, op in enumerate(ops) if op.startswith("bar."))
    while ops[i].startswith("bar."):
        i += 1
    return ops[i:]

fmt = dict(G=128, FMAX=448.0, RFMAX=1 / 448.0, MBITS=3, EMIN=-6, POW2=False, EXACT_ROUND=False)
norm = ["*bf16", "*bf16", "*bf16", "i32", "i32", "i32", "fp32"]
add = ["*bf16"] * 5 + ["i32"] * 5 + ["fp32", "*fp8e4nv", "*fp32", "i32"]
warps = TN.norm_warps(4096)  # as every launch at an 8B model's 4096 columns
plain = float_ops(TN._rms_norm_kernel, norm, dict(BLOCK_H=4096, INTERPRET=False), warps)
quant = float_ops(TF._rms_norm_quant_kernel, norm + ["*fp8e4nv", "*fp32", "i32"],
                  dict(BLOCK_H=4096, INTERPRET=False, **fmt), warps)
for q, alone in ((False, plain), (True, quant)):
    fused = float_ops(TF._add_rms_norm_kernel, add, dict(BLOCK_H=4096, INTERPRET=False, QUANT=q, **fmt), warps)
    body = after_first_barrier(fused)
    prologue = fused[: len(fused) - len(body)]
    # The opcodes in order (what FMA contraction changes) and what each instruction computes from what: at 32
    # warps a thread holds 4 values, which the two kernels convert and square in another (independent) order,
    # so register names permute and are compared through the dataflow instead.
    opcodes = [op.split()[0] for op in body]
    assert opcodes == [op.split()[0] for op in alone], (q, len(body), len(alone))
    assert dataflow(body) == dataflow(alone), (q, dataflow(body) - dataflow(alone), dataflow(alone) - dataflow(body))
    assert not any(".bf16" in op.split(" ")[0] and not op.startswith("cvt") for op in prologue), prologue
print("ok")
'''


@pytest.mark.slow
def test_the_fused_norm_compiles_to_the_norm_kernels_float_instructions():
    """Ahead-of-time sm_90 PTX (no GPU; ~10 s): after the add's barrier, `_add_rms_norm_kernel` runs the float
    instructions of `_rms_norm_kernel` (QUANT off) / `_rms_norm_quant_kernel` (on) in the same order and on the
    same dataflow, at hidden 4096 with the launches' warps (their bits: tests/numerics/gpu/
    test_fused_add_norm_gpu.py); the add itself is an fp32 add and a cvt.rn, no native bf16 arithmetic."""
    run_offline_compile(_COMPILE_FOR_SM90)
