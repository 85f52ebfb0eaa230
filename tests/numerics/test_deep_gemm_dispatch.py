"""Where AUTO launches DeepGEMM (CPU: a stand-in H200 and a recording stand-in for the deep_gemm package).

On Hopper DeepGEMM's 1x128 x 128x128 kernel gives cuBLAS's bits (tests/numerics/gpu/test_deep_gemm_gpu.py), so
AUTO takes it, where installed, for the launches that would run pinned cuBLAS or cuBLAS above decode sizes, and
nowhere else: not the wgrad pair, not FP32 out, not decode sizes, not a kernel named by the policy, not off SM90.
"""

import sys
import types

import pytest
import torch

from precision_engine.numerics.capabilities import DeviceInfo, Gemm
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG, quantize_tokens_transposed

ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
TOKENS = PRESET_FORMATS["fp8_group_tokens"]


@pytest.fixture
def launches(monkeypatch):
    """Install a Hopper with (or without) deep_gemm; returns the list of launches: "deep_gemm", "cublas",
    "triton"."""
    from precision_engine.numerics import cublas_pinned, gemm, triton_gemm

    seen = []
    fake = types.ModuleType("deep_gemm")
    monkeypatch.setattr(gemm, "_deep_gemm_failure", [])

    def fp8_gemm_nt(a, b, out):
        seen.append("deep_gemm")
        if fake.refuse:
            raise RuntimeError("NVCC compilation failed")
        assert a[0].shape[1] == b[0].shape[1] and out.shape == (a[0].shape[0], b[0].shape[0])
        assert a[1].shape == (a[0].shape[0], a[0].shape[1] // 128) and b[1].is_contiguous()
        out.fill_(1.0)

    fake.fp8_gemm_nt, fake.refuse = fp8_gemm_nt, False
    monkeypatch.setitem(sys.modules, "deep_gemm", fake)
    monkeypatch.setattr(cublas_pinned, "builds", lambda: True)
    monkeypatch.setattr(gemm, "_cublas_gemm", lambda *args, **kwargs: seen.append("cublas") or "cublas")
    monkeypatch.setattr(triton_gemm, "block_scaled_gemm", lambda *args, **kwargs: seen.append("triton") or "triton")

    def install(deep_gemm=True, capability=(9, 0), refuse=False):
        fake.refuse = refuse
        info = DeviceInfo("cuda", capability=capability, cublas_blockwise=True, deep_gemm=deep_gemm)
        monkeypatch.setattr(gemm, "device_info", lambda device: info)
        return seen
    return install


def _forward(m, n=256, k=512):
    return quantize_rows_1xG(torch.randn(m, k), ACT), quantize_blocks(torch.randn(n, k) * 0.02, WEIGHT)


@pytest.mark.parametrize("batch_invariant", [True, False])
def test_auto_forward_above_decode_sizes_launches_deep_gemm(launches, batch_invariant):
    from precision_engine.numerics.gemm import fp8_gemm

    seen = launches()
    out = fp8_gemm(*_forward(65), batch_invariant=batch_invariant)
    assert seen == ["deep_gemm"] and out.shape == (65, 256) and out.dtype == torch.bfloat16
    assert bool((out == 1).all())


def test_dgrad_launches_deep_gemm_and_wgrad_keeps_cublas(launches):
    from precision_engine.numerics.gemm import fp8_gemm, transpose_operand

    seen = launches()
    _, wq = _forward(1)
    dyq = quantize_rows_1xG(torch.randn(300, 256), ACT)
    fp8_gemm(dyq, transpose_operand(wq), gemm=Gemm.DGRAD)
    dyt = quantize_tokens_transposed(torch.randn(256, 384), TOKENS)
    xt = quantize_tokens_transposed(torch.randn(256, 512), TOKENS)
    fp8_gemm(dyt, xt, gemm=Gemm.WGRAD)
    assert seen == ["deep_gemm", "cublas"]


@pytest.mark.parametrize("case", ["decode", "fp32 out", "named cublas", "not installed", "sm100", "n not x128"])
def test_auto_keeps_its_other_launches(launches, case):
    from precision_engine.numerics.gemm import fp8_gemm

    seen = launches(deep_gemm=case != "not installed", capability=(10, 0) if case == "sm100" else (9, 0))
    a, b = _forward(64 if case == "decode" else 1024, n=200 if case == "n not x128" else 256)
    kwargs = {"out_dtype": torch.float32} if case == "fp32 out" else {}
    kwargs |= {"kernel": Kernel.CUBLAS} if case == "named cublas" else {}
    fp8_gemm(a, b, **kwargs)
    assert "deep_gemm" not in seen and len(seen) == 1


def test_deep_gemm_by_name_runs_it_at_any_size(launches):
    from precision_engine.numerics.gemm import fp8_gemm

    seen = launches()
    fp8_gemm(*_forward(3), kernel=Kernel.DEEP_GEMM)
    assert seen == ["deep_gemm"]


def test_a_failing_deep_gemm_warns_once_and_auto_keeps_its_own_launch(launches):
    """An install that cannot compile its kernels (no nvcc at run time) must not stop a run cuBLAS can finish
    with the same bits: one warning, then DeepGEMM is not tried again in this process."""
    from precision_engine.numerics.gemm import fp8_gemm

    seen = launches(refuse=True)
    with pytest.warns(RuntimeWarning, match="DeepGEMM failed .*NVCC compilation failed.*same bits"):
        assert fp8_gemm(*_forward(1024), batch_invariant=False) == "cublas"
    assert fp8_gemm(*_forward(1024), batch_invariant=False) == "cublas"
    assert seen == ["deep_gemm", "cublas", "cublas"]
