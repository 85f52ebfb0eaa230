"""The attention kernel quantizes its output for o_proj in its epilogue (`triton_invariant.attention(...,
quantize=fmt)`), in Triton's CPU interpreter at small shapes (D = 128, the 1x128 group; the file takes ~6 s on
one core, the sm_90 PTX check ~10 s more, marked slow).

Bitwise, for the batch-invariant and the fast launch, a BF16 and an FP8 KV cache, one query per row (decode)
and several (a prefill chunk) with padding queries (q_pos = -1, zeros out) among them:
- the output equals the launch without quantization;
- the FP8 half equals `quantize_rows_1xG` of the output as o_proj reads it, [B * Tq, Hq * D] (bytes, scales and
  the M-major scale layout); a padding query's group is the quantizer's zero group. The interpreter's fp32 ->
  fp8 cast misrounds (triton 3.9), so there the epilogue rounds onto the FP8 grid first (EXACT_ROUND), as the
  1xG quantizer's kernels do; on the GPU tests/numerics/gpu/test_attention_quant_gpu.py compares the hardware
  casts at 8B shapes.
Inputs are fresh Gaussians, v scaled per slot over ~1e-2..1e2 so the groups' scales spread; slots past kv_len
hold NaN in the BF16 cache (never read).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

pytest.importorskip("triton")

from precision_engine.errors import UnsupportedError  # noqa: E402
from precision_engine.numerics import invariant  # noqa: E402
from precision_engine.numerics import quantize as Q  # noqa: E402
from precision_engine.numerics import triton_invariant as TI  # noqa: E402
from precision_engine.numerics.formats import Axis, DType, ScaleKind  # noqa: E402
from precision_engine.numerics.kv_cache import quantize_kv  # noqa: E402

from helpers import BASE, assert_bitwise, run_offline_compile  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ACT = BASE[2]  # e4m3 1x128, fp32 scales
B, HQ, HKV, S, D = 4, 8, 2, 160, 128


def _case(tq, fp8, seed):
    """q at the last tq positions of each row's kv_len (0, 3, 97, 160): positions below 0 are padding queries,
    every one of row 0's and, in a chunk of more than 3, the first of row 1's."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, HQ, tq, D, generator=g).bfloat16()
    k = torch.randn(B, HKV, S, D, generator=g).bfloat16()
    v = (torch.randn(B, HKV, S, D, generator=g) * torch.exp(torch.randn(B, HKV, S, 1, generator=g) * 1.5)).bfloat16()
    kv_len = torch.tensor([0, 3, 97, S])
    q_pos = (kv_len[:, None] - tq + torch.arange(tq)).clamp(min=-1)
    kw = {"scale": D ** -0.5}
    if fp8:
        scales = k.float().abs().amax(dim=(0, 2, 3)) / 448, v.float().abs().amax(dim=(0, 2, 3)) / 448
        k, v = quantize_kv(k, scales[0]), quantize_kv(v, scales[1])
        kw.update(k_scale=scales[0].to(DEVICE), v_scale=scales[1].to(DEVICE))
    else:
        filled = torch.arange(S)[None, None, :, None] < kv_len[:, None, None, None]
        k, v = (torch.where(filled, t, float("nan")) for t in (k, v))
    return (*(t.to(DEVICE) for t in (q, k, v, q_pos, kv_len)), kw)


def _o_proj_input(out):
    b, hq, tq, d = out.shape
    return out.transpose(1, 2).reshape(b * tq, hq * d)


def _assert_handover(args, kw, fmt, *, fast):
    plain = TI.attention(*args, fast=fast, **kw)
    out, xq = TI.attention(*args, fast=fast, quantize=fmt, **kw)
    assert torch.equal(out.view(torch.int16), plain.view(torch.int16)) and torch.isfinite(out).all()
    assert xq.fmt == fmt and xq.data.dtype == Q.fp8_dtype(fmt)
    assert_bitwise(xq, Q.quantize_rows_1xG(_o_proj_input(out), fmt))
    return out, xq


@pytest.mark.parametrize("tq", [1, 5], ids=["decode", "chunk"])
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16-cache", "fp8-cache"])
@pytest.mark.parametrize("fast", [False, True], ids=["invariant", "fast"])
def test_the_epilogue_quantizes_as_the_separate_quantizer(fast, fp8, tq):
    *args, kw = _case(tq, fp8, seed=10 * tq + fp8)
    out, xq = _assert_handover(args, kw, ACT, fast=fast)
    padding = args[3] < 0  # [B, Tq]
    assert padding.sum() == (tq if tq <= 3 else tq + tq - 3)
    assert torch.equal(out.transpose(1, 2)[padding], torch.zeros_like(out.transpose(1, 2)[padding]))
    assert torch.equal(xq.data.view(B, tq, HQ * D)[padding].view(torch.uint8).cpu(),
                       torch.zeros(int(padding.sum()), HQ * D, dtype=torch.uint8))


@pytest.mark.parametrize("fmt", [replace(ACT, scale=ScaleKind.POW2), replace(ACT, dtype=DType.FLOAT8_E5M2)],
                         ids=lambda f: f.describe())
def test_other_group_formats(fmt):
    *args, kw = _case(3, True, seed=5)
    _assert_handover(args, kw, fmt, fast=False)


def test_autograd_differentiates_the_output_as_without_the_quantization():
    """The training forward's path (`_Attention`): the same output and FP8 half, the same gradients; the FP8
    data and scales carry none."""
    *args, kw = _case(4, False, seed=7)
    q, k, v, q_pos, kv_len = args
    k, v = (torch.nan_to_num(t) for t in (k, v))
    gy = torch.randn(q.shape, generator=torch.Generator().manual_seed(8)).bfloat16().to(DEVICE)
    grads = []
    for fmt in (None, ACT):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        got = TI.attention(*leaves, q_pos, kv_len, quantize=fmt, **kw)
        out = got if fmt is None else got[0]
        if fmt is not None:
            assert not got[1].data.requires_grad and not got[1].scale.requires_grad
            assert_bitwise(got[1], Q.quantize_rows_1xG(_o_proj_input(out.detach()), fmt))
        grads.append((out.detach(), *torch.autograd.grad(out, leaves, gy)))
    assert all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(*grads))


def test_formats_the_epilogue_cannot_make_are_refused_and_composed_elsewhere():
    """A group that is not one head, or groups along tokens: the kernel refuses them; `invariant.attention`
    quantizes its output afterwards (as it does on the CPU for every format)."""
    *args, kw = _case(2, False, seed=3)
    for fmt in (replace(ACT, group=64), replace(ACT, axis=Axis.TOKENS)):
        with pytest.raises(UnsupportedError, match="one head"):
            TI.attention(*args, quantize=fmt, **kw)
    cpu = [t.cpu() for t in args]
    cpu[1], cpu[2] = (torch.nan_to_num(t) for t in cpu[1:3])
    for fmt in (ACT, replace(ACT, group=64)):
        out, xq = invariant.attention(*cpu, quantize=fmt, **kw)
        assert torch.equal(out.view(torch.int16), invariant.attention(*cpu, **kw).view(torch.int16))
        assert_bitwise(xq, Q.quantize_rows_1xG(_o_proj_input(out), fmt))


def test_empty_batch():
    q = torch.zeros(0, HQ, 1, D, dtype=torch.bfloat16, device=DEVICE)
    k = torch.zeros(0, HKV, S, D, dtype=torch.bfloat16, device=DEVICE)
    pos, kv_len = torch.zeros(0, 1, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    out, xq = TI.attention(q, k, k, pos, kv_len, scale=1.0, quantize=ACT)
    assert out.shape == q.shape and xq.data.shape == (0, HQ * D) and xq.scale.shape == (0, HQ)


_COMPILE_FOR_SM90 = r'''
import re
from collections import Counter
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from precision_engine.numerics import triton_attention as TA

def float_ops(quant, kv, block_m, fold, stages, lse=False):
    """The kernel's float instructions (sm_90 PTX) by opcode, a paired rounding (to bf16x2, f16x2) or NaN test
    counted as two (the same instruction on each value: LLVM packs them or not by context)."""
    types = ["*bf16", kv, kv, "*bf16", "*fp8e4nv", "*fp32", "*fp32", "*i64", "*i64", "*fp32", "*fp32", "fp32"]
    types += ["i32"] * 17
    fmt = dict(FMAX=448.0, RFMAX=1 / 448.0, MBITS=3, EMIN=-6, POW2=False, EXACT_ROUND=False) if quant else TA._NO_QUANT
    constexprs = dict(G=4, D=128, BLOCK_M=block_m, BLOCK_N=64, FP8_KV=kv != "*bf16", SCALE_PER_HEAD=True,
                      FOLD_SCALES=fold, INTERPRET=False, LSE=lse, QUANT=quant, **fmt)
    fn = TA._attention_kernel
    sig = dict(zip(fn.arg_names, types + ["constexpr"] * len(constexprs)))
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(types) if t.startswith("*")}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                         options={"num_warps": 4, "num_stages": stages}).asm["ptx"]
    ops = Counter()
    for line in ptx.splitlines():
        op = re.sub(r"^@!?%p\d+\s+", "", line.strip()).split(" ")[0].split("\t")[0]
        if op in ("cvt.rn.bf16x2.f32", "cvt.rn.f16x2.f32", "setp.num.bf16x2"):
            ops[op.replace("x2", "")] += 2
        elif any(t in op for t in (".f32", ".bf16", ".f16")):
            ops[op] += 1
    return ops

epilogues = {}
for kv, block_m, fold, stages in (("*bf16", 64, False, 2), ("*fp8e4nv", 64, False, 3), ("*bf16", 16, False, 3),
                                  ("*fp8e4nv", 16, True, 3)):
    plain, quant = (float_ops(q, kv, block_m, fold, stages) for q in (False, True))
    assert not plain - quant, (kv, block_m, plain - quant)  # every instruction of the attention is still there
    epilogue = quant - plain
    assert not any(op.startswith(("add.", "sub.")) for op in epilogue), epilogue  # nothing contracted away
    assert epilogue["cvt.rn.satfinite.e4m3x2.f32"] * 2 * 128 == block_m * 128, epilogue
    assert epilogues.setdefault(block_m, epilogue) == epilogue, (kv, block_m)  # the same whatever the cache
# the training forward's logsumexp (bf16 q, k, v): every instruction of the attention kept
for quant in (False, True):
    plain, lse = (float_ops(quant, "*bf16", 64, False, 2, lse=with_lse) for with_lse in (False, True))
    assert not plain - lse, (quant, plain - lse)
print("ok")
'''


@pytest.mark.slow
def test_the_epilogue_leaves_the_attention_instructions_alone():
    """Ahead-of-time sm_90 PTX (no GPU; ~10 s): with QUANT the kernel keeps every float instruction of the
    launch without it and adds the same quantization epilogue for a BF16 and an FP8 cache (per tile shape:
    the invariant 64-row tile, the fast 16-row one), with no add left over from a contraction change. The same
    holds for the logsumexp the training forward stores. The bits themselves are pinned on the GPU
    (tests/numerics/gpu/test_attention_quant_gpu.py)."""
    run_offline_compile(_COMPILE_FOR_SM90)
