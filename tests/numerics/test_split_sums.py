"""A split-K FP8 GEMM's segment sums handed to the residual add + RMSNorm after it (`SplitSums`): the GEMM skips
its second launch and the norm kernel adds the segments, bitwise as the GEMM's own sum would.

In Triton's CPU interpreter at decode sizes (M 1..64) on launches that split K (`k_segments`: AUTO's own
launches split no K since the sixteenth session): add_rms_norm over the sums
equals add_rms_norm over the GEMM's output, with and without the 1x128 quantization; `Fp8Linear` hands over
sums only without autograd and bias. (The interpreter's fp32 -> bf16 cast truncates, in the GEMM's store and
in this kernel alike, so `SplitSums.total()`, which rounds to nearest, is compared on the GPU only:
tests/numerics/gpu/test_split_sums_gpu.py.)
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from dataclasses import replace  # noqa: E402

from precision_engine.numerics import fused_quant as F  # noqa: E402
from precision_engine.numerics.contract import SplitSums  # noqa: E402
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel, LinearSpec  # noqa: E402
from precision_engine.numerics.linear import Fp8Linear  # noqa: E402
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG  # noqa: E402
from precision_engine.numerics.triton_gemm import block_scaled_gemm  # noqa: E402


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.usefixtures("k_segments")  # AUTO splits no K now: launches with segments


def _same(a, b):
    assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
WGRAD = PRESET_FORMATS["fp8_group_tokens"]


def _operands(m, n, k, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).bfloat16().to(DEVICE)
    w = (torch.randn(n, k, generator=g) * 0.05).bfloat16().to(DEVICE)
    return quantize_rows_1xG(x, ACT), quantize_blocks(w, WEIGHT)


def _gemm(xq, wq, **kw):
    return block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, **kw)


@pytest.mark.parametrize("m", [1, 5, 64])
@pytest.mark.parametrize("fmt", [None, ACT])
def test_add_rms_norm_over_split_sums_equals_it_over_the_gemm_output(m, fmt):
    n, k = 256, 2048
    xq, wq = _operands(m, n, k, seed=m)
    sums = _gemm(xq, wq, split_sums=True)
    if m > 16:  # M <= 16 sums in the GEMM (its last program per tile): no second launch to save
        assert isinstance(sums, SplitSums) and sums.parts.shape == (k // 128 // 4, m, n)  # `k_segments`
    y = _gemm(xq, wq)
    residual = torch.randn(m, n, generator=torch.Generator().manual_seed(7)).bfloat16().to(DEVICE) * 3
    weight = (torch.rand(n, generator=torch.Generator().manual_seed(8)) + 0.5).bfloat16().to(DEVICE)
    fused = F.add_rms_norm(residual, sums, weight, 1e-5, fmt, backend="triton")
    plain = F.add_rms_norm(residual, y, weight, 1e-5, fmt, backend="triton")
    for a, b in zip(fused[:2], plain[:2]):
        _same(a, b)
    if fmt is not None:
        _same(fused[2].data, plain[2].data)
        _same(fused[2].scale, plain[2].scale)


def test_split_sums_keep_their_shape_and_refuse_a_mismatched_x():
    xq, wq = _operands(64, 256, 2048, seed=3)
    sums = _gemm(xq, wq, split_sums=True)
    assert tuple(sums.shape) == (64, 256)
    weight = torch.ones(256, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(Exception, match="differ"):
        F.add_rms_norm(torch.zeros(32, 256, dtype=torch.bfloat16, device=DEVICE), sums, weight, 1e-5)
    assert _gemm(xq, wq).shape == (64, 256)


def test_fp8_linear_hands_over_sums_only_without_autograd_and_bias():
    spec = replace(LinearSpec(weight=WEIGHT, input=ACT, grad_output=ACT, wgrad_operands=WGRAD), kernel=Kernel.TRITON)
    linear = torch.nn.Linear(2048, 256, bias=False, dtype=torch.bfloat16, device=DEVICE)
    fp8 = Fp8Linear.from_linear(linear, spec)
    x = torch.randn(64, 2048, generator=torch.Generator().manual_seed(1)).bfloat16().to(DEVICE)
    with torch.no_grad():
        sums = fp8(x, split_sums=True)
        assert isinstance(sums, SplitSums) and sums.parts.shape[1:] == (64, 256)
        residual = torch.randn(64, 256, generator=torch.Generator().manual_seed(2)).bfloat16().to(DEVICE)
        weight = torch.ones(256, dtype=torch.bfloat16, device=DEVICE)
        _same(F.add_rms_norm(residual, sums, weight, 1e-5, backend="triton")[1],
              F.add_rms_norm(residual, fp8(x), weight, 1e-5, backend="triton")[1])
    assert isinstance(fp8(x, split_sums=True), torch.Tensor)  # autograd recorded: the plain output
    biased = Fp8Linear.from_linear(torch.nn.Linear(2048, 256, dtype=torch.bfloat16, device=DEVICE), spec)
    with torch.no_grad():
        assert isinstance(biased(x, split_sums=True), torch.Tensor)


@pytest.mark.parametrize("rows", [64, 17])
def test_rope_qkv_sums_equal_the_sum_then_rope_qk(rows):
    """The fused q/k/v GEMM's segment sums added in the RoPE launch: q, k rotated and v as the GEMM's own
    output followed by `rope_qk` give them (batch 1 x rows tokens and rows x 1, so both T layouts run)."""
    from precision_engine.numerics import invariant
    from precision_engine.numerics import triton_invariant as TI

    hq, hk, d = 4, 2, 32
    xq, wq = _operands(rows, (hq + 2 * hk) * d, 2048, seed=rows)
    sums = _gemm(xq, wq, split_sums=True)
    assert isinstance(sums, SplitSums)
    y = _gemm(xq, wq)
    for batch in (1, rows):
        t = rows // batch
        g = torch.Generator().manual_seed(4)
        cos, sin = (torch.randn(batch, t, d, generator=g).bfloat16().to(DEVICE) for _ in range(2))
        q, k, v = TI.rope_qkv_sums(sums, batch, (hq, hk), cos, sin)
        y4 = y.view(batch, t, hq + 2 * hk, d)
        q_ref, k_ref = invariant.rope_qk(y4[:, :, :hq], y4[:, :, hq:hq + hk], cos, sin)
        for a, b in ((q, q_ref), (k, k_ref), (v, y4[:, :, hq + hk:])):
            assert a.shape == b.shape
            _same(a, b)
