"""RoPE of q and k in one launch (triton_invariant.rope_qk, invariant.rope_qk) against the two `rope` calls,
bitwise.

Without CUDA the kernel runs in Triton's CPU interpreter (tiny shapes; ~2 s on one core): decode and prefill
shapes, GQA head counts that are not powers of two, q and k as strided views of one fused q/k/v output, bf16
and fp16, against `triton_invariant.rope` and torch's `x * cos + rotate_half(x) * sin`. With autograd recorded
the two differentiable calls run (same bits, same gradients). An ahead-of-time sm_90 compilation (slow) checks
that the launch runs the float instructions of the two separate kernels and no native 16-bit arithmetic. Full
sizes: tests/numerics/gpu/test_rope_qk_gpu.py.
"""

from __future__ import annotations


import pytest
import torch

pytest.importorskip("triton")

from precision_engine.errors import UnsupportedError  # noqa: E402
from precision_engine.numerics import invariant  # noqa: E402
from precision_engine.numerics import triton_invariant as TI  # noqa: E402

from helpers import run_offline_compile  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _bits(t):
    return t.contiguous().view(torch.int16)


def _qk(b, t, hq, hk, d, dtype, seed=0):
    """q, k as column views of one [B, T, (Hq + 2 Hk) D] projection output; cos, sin of large angles."""
    g = torch.Generator().manual_seed(seed)
    qkv = (torch.randn(b, t, (hq + 2 * hk) * d, generator=g) * 3).to(dtype).to(DEVICE)
    q = qkv[..., : hq * d].view(b, t, hq, d)
    k = qkv[..., hq * d : (hq + hk) * d].view(b, t, hk, d)
    angle = torch.randn(b, t, d, generator=g) * 50
    return q, k, angle.cos().to(dtype).to(DEVICE), angle.sin().to(dtype).to(DEVICE)


def _torch_rope(x, cos, sin):
    xt, half = x.transpose(1, 2), x.shape[-1] // 2
    return xt * cos[:, None] + torch.cat((-xt[..., half:], xt[..., :half]), dim=-1) * sin[:, None]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b,t,hq,hk,d", [(3, 1, 4, 2, 16), (2, 5, 6, 3, 32), (1, 7, 8, 1, 64)],
                         ids=["decode", "prefill-odd-heads", "mqa"])
def test_one_launch_equals_the_two_calls(b, t, hq, hk, d, dtype):
    q, k, cos, sin = _qk(b, t, hq, hk, d, dtype)
    assert not q.is_contiguous() and not k.is_contiguous()  # views, as the decoder hands them over
    rq, rk = TI.rope_qk(q, k, cos, sin)
    assert rq.shape == (b, hq, t, d) and rk.shape == (b, hk, t, d)
    assert torch.equal(_bits(rq), _bits(TI.rope(q, cos, sin))) and torch.equal(_bits(rk), _bits(TI.rope(k, cos, sin)))
    assert torch.equal(_bits(rq), _bits(_torch_rope(q, cos, sin)))
    assert torch.equal(_bits(rk), _bits(_torch_rope(k, cos, sin)))
    iq, ik = invariant.rope_qk(q, k, cos, sin)  # CPU tensors: the torch ops; CUDA: this kernel
    assert torch.equal(_bits(iq), _bits(rq)) and torch.equal(_bits(ik), _bits(rk))


def test_autograd_runs_the_two_differentiable_calls():
    q, k, cos, sin = _qk(2, 3, 4, 2, 32, torch.bfloat16, seed=1)
    q, k = q.clone().requires_grad_(), k.clone().requires_grad_()
    rq, rk = TI.rope_qk(q, k, cos, sin)
    with torch.no_grad():
        fq, fk = TI.rope_qk(q, k, cos, sin)
    assert rq.requires_grad and rk.requires_grad
    assert torch.equal(_bits(rq.detach()), _bits(fq)) and torch.equal(_bits(rk.detach()), _bits(fk))
    gq, gk = (torch.randn(x.shape, generator=torch.Generator().manual_seed(2)).to(x) for x in (rq, rk))
    got = torch.autograd.grad((rq, rk), (q, k), (gq, gk))
    ref = torch.autograd.grad((TI.rope(q, cos, sin), TI.rope(k, cos, sin)), (q, k), (gq, gk))
    assert all(torch.equal(_bits(a), _bits(r)) for a, r in zip(got, ref))


def test_empty_and_refused_inputs():
    q, k, cos, sin = _qk(0, 3, 4, 2, 16, torch.bfloat16)
    rq, rk = TI.rope_qk(q, k, cos, sin)
    assert rq.shape == (0, 4, 3, 16) and rk.shape == (0, 2, 3, 16)
    q, k, cos, sin = _qk(2, 3, 4, 2, 16, torch.bfloat16)
    with pytest.raises(UnsupportedError, match="bf16/fp16"):
        TI.rope_qk(q, k.half(), cos, sin)
    with pytest.raises(ValueError, match="must be"):
        TI.rope_qk(q, k[:, :2], cos, sin)


_COMPILE_FOR_SM90 = r'''
import collections, re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from precision_engine.numerics import triton_rope as TR

def float_ops(fn, types, constexprs):
    sig = dict(zip(fn.arg_names, types + ["constexpr"] * len(constexprs)))
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(types) if t.startswith("*")}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
    ops = [re.sub(r"^@!?%p\d+\s+", "", line.strip()).split()[0] for line in ptx.splitlines() if line.strip()]
    return collections.Counter(op for op in ops if any(t in op for t in (".f32", ".bf16", ".f16")))

one = ["*bf16"] * 4 + ["i32"] * 7
q = float_ops(TR._rope_kernel, one, dict(D=128, BLOCK_H=32, INTERPRET=False))
k = float_ops(TR._rope_kernel, one, dict(D=128, BLOCK_H=8, INTERPRET=False))
qk = float_ops(TR._rope_qk_kernel, ["*bf16"] * 6 + ["i32"] * 11,
               dict(D=128, BLOCK_HQ=32, BLOCK_HK=8, INTERPRET=False))
saved = q + k - qk  # Triton 3.9 shares the two launches' sign select, 3.6 (the GPU image) keeps both
assert not qk - (q + k) and saved <= collections.Counter({"selp.f32": 1}), (q + k, qk)
assert not [op for op in qk if op.startswith(("fma", "add.bf16", "mul.bf16", "add.rn.bf16", "add.f16"))], qk
print("ok")
'''


@pytest.mark.slow
def test_the_launch_compiles_to_the_two_kernels_float_instructions():
    """Ahead-of-time sm_90 PTX (no GPU; ~5 s), 8B decode shapes (32 q heads, 8 kv heads, D 128): the float
    instructions of `_rope_qk_kernel` are those of `_rope_kernel` for q plus for k (Triton 3.9 shares the
    rotation sign's select, 3.6 keeps both), with every rounding a cvt.rn of its own and no FMA or native bf16/fp16 arithmetic."""
    run_offline_compile(_COMPILE_FOR_SM90)
