"""Split-K segment sums handed to the residual add + RMSNorm (`SplitSums`) at Llama-3.1-8B decode shapes on the
GPU: `total()` and the norm kernel's in-order sum equal the GEMM's own second launch bitwise (o_proj 4096x4096
and down_proj 4096x14336 at M = 17..64, the rows whose launch splits K with a separate sum). Seconds.
"""

from __future__ import annotations

import pytest
import torch

from precision_engine.numerics import fused_quant as F
from precision_engine.numerics.contract import SplitSums
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import block_scaled_gemm

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
              pytest.mark.usefixtures("k_segments")]

ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]


@pytest.mark.parametrize("n,k", [(4096, 4096), (4096, 14336)])
@pytest.mark.parametrize("m", [17, 64])
def test_split_sums_equal_the_gemm_output_at_8b_shapes(n, k, m):
    g = torch.Generator(device="cuda").manual_seed(m)
    xq = quantize_rows_1xG(torch.randn(m, k, device="cuda", generator=g).bfloat16(), ACT)
    wq = quantize_blocks((torch.randn(n, k, device="cuda", generator=g) * 0.02).bfloat16(), WEIGHT)
    gemm = lambda **kw: block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, **kw)  # noqa: E731
    y, sums = gemm(), gemm(split_sums=True)
    assert isinstance(sums, SplitSums) and torch.equal(sums.total(), y)
    residual = torch.randn(m, n, device="cuda", generator=g).bfloat16() * 4
    weight = (torch.rand(n, device="cuda", generator=g) + 0.5).bfloat16()
    fused = F.add_rms_norm(residual, sums, weight, 1e-5, ACT)
    plain = F.add_rms_norm(residual, y, weight, 1e-5, ACT)
    for a, b in ((fused[0], plain[0]), (fused[1], plain[1]), (fused[2].data, plain[2].data),
                 (fused[2].scale, plain[2].scale)):
        assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.parametrize("batch,t", [(64, 1), (17, 1), (2, 32)])
def test_rope_qkv_sums_at_8b_shapes(batch, t):
    """The fused q/k/v (6144x4096) segment sums added in the RoPE launch: bitwise the GEMM's output, then
    `rope_qk` (q, k) and its v columns."""
    from precision_engine.numerics import invariant

    hq, hk, d, m = 32, 8, 128, batch * t
    g = torch.Generator(device="cuda").manual_seed(m)
    xq = quantize_rows_1xG(torch.randn(m, 4096, device="cuda", generator=g).bfloat16(), ACT)
    wq = quantize_blocks((torch.randn(6144, 4096, device="cuda", generator=g) * 0.02).bfloat16(), WEIGHT)
    gemm = lambda **kw: block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, **kw)  # noqa: E731
    sums = gemm(split_sums=True)
    assert isinstance(sums, SplitSums)
    cos, sin = (torch.randn(batch, t, d, device="cuda", generator=g).bfloat16() for _ in range(2))
    q, k, v = invariant.rope_qkv_sums(sums, batch, (hq, hk), cos, sin)
    y = gemm().view(batch, t, hq + 2 * hk, d)
    q_ref, k_ref = invariant.rope_qk(y[:, :, :hq], y[:, :, hq:hq + hk], cos, sin)
    for a, b in ((q, q_ref), (k, k_ref), (v, y[:, :, hq + hk:])):
        assert torch.equal(a.contiguous().view(torch.int16), b.contiguous().view(torch.int16))
