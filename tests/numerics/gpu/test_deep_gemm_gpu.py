"""DeepGEMM where installed (Hopper): the bits AUTO relies on when it launches it in place of cuBLAS.

AUTO's batch-invariant forward gives pinned cuBLAS's bits above decode sizes and the Triton/Gluon kernels' (the
same bits) at decode sizes; DeepGEMM may stand in for the first only if it makes exactly those additions, at any
M. First measured on an H200 in the eighteenth session (BENCHMARKS.md); each new DeepGEMM release must pass again.
"""

import pytest
import torch

from precision_engine.numerics.capabilities import Gemm
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import deep_gemm_available, fp8_gemm, reference_gemm, transpose_operand
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0)
                       or not deep_gemm_available(), reason="needs DeepGEMM on a Hopper GPU"),
]
ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]


def _operands(m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16) * 0.02
    return quantize_rows_1xG(x, ACT), quantize_blocks(w, WEIGHT)


def _bits(t):
    return t.view(torch.int16)


@pytest.mark.parametrize("n,k", [(4096, 4096), (14336, 4096), (4096, 14336), (384, 1024)])
def test_deep_gemm_gives_pinned_cublas_bits_forward_and_dgrad(n, k):
    xq, wq = _operands(1024, n, k, seed=n + k)
    got = fp8_gemm(xq, wq, kernel=Kernel.DEEP_GEMM)
    assert torch.equal(_bits(got), _bits(fp8_gemm(xq, wq, kernel=Kernel.CUBLAS_PINNED)))
    ref = reference_gemm(xq, wq, out_dtype=torch.float64)
    assert ((got.double() - ref).norm() / ref.norm()).item() < 5e-3
    dyq, _ = _operands(1024, k, n, seed=1)  # dy [M, N] against Q(W)^T [K, N]
    wt = transpose_operand(wq)
    assert torch.equal(_bits(fp8_gemm(dyq, wt, kernel=Kernel.DEEP_GEMM, gemm=Gemm.DGRAD)),
                       _bits(fp8_gemm(dyq, wt, kernel=Kernel.CUBLAS_PINNED, gemm=Gemm.DGRAD)))


@pytest.mark.parametrize("n,k", [(4096, 4096), (28672, 4096)])
def test_deep_gemm_rows_are_batch_invariant(n, k):
    """DeepGEMM picks its tiles by M; a row's bits must not follow them (M = 1 .. 8192, M not a multiple of 4
    included: its scales are then copied into an aligned buffer)."""
    xq, wq = _operands(8192, n, k, seed=7)
    full = fp8_gemm(xq, wq, kernel=Kernel.DEEP_GEMM)
    for m in (1, 3, 65, 200, 1023, 4096):
        sub = type(xq)(xq.data[:m], xq.scale[:m], xq.fmt)
        assert torch.equal(_bits(fp8_gemm(sub, wq, kernel=Kernel.DEEP_GEMM)), _bits(full[:m])), f"M={m}"


def test_auto_launches_deep_gemm_with_the_decode_kernels_bits(monkeypatch):
    """AUTO above 64 rows launches DeepGEMM; at 64 and under the Triton/Gluon kernels: one set of bits."""
    from precision_engine.numerics import gemm

    launched = []
    real = gemm._deep_gemm
    monkeypatch.setattr(gemm, "_deep_gemm", lambda *args: launched.append(1) or real(*args))
    xq, wq = _operands(1024, 4096, 4096, seed=5)
    full = fp8_gemm(xq, wq)
    assert launched == [1]
    for m in (1, 17, 64):
        sub = type(xq)(xq.data[:m], xq.scale[:m], xq.fmt)
        assert torch.equal(_bits(fp8_gemm(sub, wq)), _bits(full[:m])), f"M={m}"
    assert launched == [1]
