"""The kernel table: AUTO's pick per device, GEMM and M; the cuBLAS guard; explicit kernels refused with the
requirement; what `linear_problems` refuses; batch invariance per kernel."""

from dataclasses import replace

import pytest

from precision_engine.errors import UnsupportedError
from precision_engine.numerics.capabilities import (KERNELS, SMALL_M_MAX, DeviceInfo, Gemm, forward_batch_invariant,
                                                    linear_problems, resolve_kernel)
from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.formats import DType, Kernel, LinearSpec

CPU = DeviceInfo("cpu")
HOPPER = DeviceInfo("cuda", capability=(9, 0), cublas_blockwise=True)
AMPERE = DeviceInfo("cuda", capability=(8, 0), cublas_blockwise=True)
OLD_TORCH_HOPPER = DeviceInfo("cuda", capability=(9, 0), cublas_blockwise=False)
JETRL = LinearSpec(weight=P["fp8_block_weight"], input=P["fp8_group_act"], grad_output=P["fp8_group_act"],
                   wgrad_operands=P["fp8_group_tokens"])


def test_every_kernel_has_one_row():
    assert set(KERNELS) == set(Kernel) - {Kernel.AUTO}


def test_auto_off_cuda_is_the_exact_reference_forward_and_fp32_backward():
    """The forward keeps the exact, batch-invariant reference; dgrad/wgrad (never compared across M) take the
    fp32 emulation, several times faster on a CPU."""
    assert resolve_kernel(Kernel.AUTO, device=CPU, m=8192, gemm=Gemm.FPROP) is Kernel.REFERENCE
    for gemm in (Gemm.DGRAD, Gemm.WGRAD):
        assert resolve_kernel(Kernel.AUTO, device=CPU, m=8192, gemm=gemm) is Kernel.EMULATED


def test_auto_on_hopper():
    """Without the pinned cuBLAS extension the batch-invariant forward is Triton's; the rest as below."""
    fprop = dict(device=HOPPER, gemm=Gemm.FPROP)
    assert resolve_kernel(Kernel.AUTO, m=8192, batch_invariant=True, **fprop) is Kernel.TRITON
    assert resolve_kernel(Kernel.AUTO, m=8192, batch_invariant=False, **fprop) is Kernel.CUBLAS
    assert resolve_kernel(Kernel.AUTO, m=SMALL_M_MAX, batch_invariant=False, **fprop) is Kernel.TRITON  # decode
    for gemm in (Gemm.DGRAD, Gemm.WGRAD):  # training only: batch invariance buys nothing there
        assert resolve_kernel(Kernel.AUTO, device=HOPPER, m=8192, gemm=gemm) is Kernel.CUBLAS
    e5m2 = frozenset({DType.FLOAT8_E5M2, DType.FLOAT8_E4M3})
    assert resolve_kernel(Kernel.AUTO, device=HOPPER, m=8192, gemm=Gemm.DGRAD, dtypes=e5m2) is Kernel.TRITON


def test_pinned_cublas_runs_by_name_only_where_blockwise_cublas_does():
    """AUTO never picks it (decode is slower than Triton's, and the two kernels' bits differ); named, it runs
    every GEMM on Hopper and is refused elsewhere with its requirement (the build itself is checked at first
    use: tests/numerics/test_cublas_pinned.py)."""
    for m in (1, SMALL_M_MAX, 8192):
        assert resolve_kernel(Kernel.AUTO, device=HOPPER, m=m, batch_invariant=True) is Kernel.TRITON
    for gemm in Gemm:
        assert resolve_kernel(Kernel.CUBLAS_PINNED, device=HOPPER, m=1, gemm=gemm) is Kernel.CUBLAS_PINNED
    for device in (AMPERE, OLD_TORCH_HOPPER, CPU):
        with pytest.raises(UnsupportedError, match="host C\\+\\+ compiler and cuBLASLt's headers"):
            resolve_kernel(Kernel.CUBLAS_PINNED, device=device, m=8192)
    with pytest.raises(UnsupportedError, match="does not run the fprop GEMM on float8_e5m2"):
        resolve_kernel(Kernel.CUBLAS_PINNED, device=HOPPER, m=1, dtypes=frozenset({DType.FLOAT8_E5M2}))


@pytest.mark.parametrize("device", [AMPERE, OLD_TORCH_HOPPER], ids=["sm80", "torch-without-blockwise"])
def test_cublas_guard_falls_back_under_auto_and_refuses_by_name(device):
    assert resolve_kernel(Kernel.AUTO, device=device, m=8192, batch_invariant=False) is Kernel.TRITON
    with pytest.raises(UnsupportedError, match="compute capability 9.0\\+ \\(Hopper\\), torch >= 2.9"):
        resolve_kernel(Kernel.CUBLAS, device=device, m=8192)


def test_explicit_kernels_are_honoured_or_refused_with_the_requirement():
    assert resolve_kernel(Kernel.TRITON, device=DeviceInfo("cpu", interpreter=True), m=1) is Kernel.TRITON
    with pytest.raises(UnsupportedError, match="triton needs a CUDA device"):
        resolve_kernel(Kernel.TRITON, device=CPU, m=1)
    with pytest.raises(UnsupportedError, match="deep_gemm package"):
        resolve_kernel(Kernel.DEEP_GEMM, device=HOPPER, m=1)
    deep = replace(HOPPER, deep_gemm=True)
    with pytest.raises(UnsupportedError, match="does not run the wgrad GEMM"):
        resolve_kernel(Kernel.DEEP_GEMM, device=deep, m=1, gemm=Gemm.WGRAD)
    assert resolve_kernel(Kernel.DEEP_GEMM, device=deep, m=1) is Kernel.DEEP_GEMM
    with pytest.raises(UnsupportedError, match="Hopper GPU .*UE8M0"):  # DeepGEMM's SM100 kernels: other numerics
        resolve_kernel(Kernel.DEEP_GEMM, device=replace(deep, capability=(10, 0)), m=1)


def test_batch_invariance_per_kernel():
    assert forward_batch_invariant(Kernel.AUTO, True) and not forward_batch_invariant(Kernel.AUTO, False)
    assert forward_batch_invariant(Kernel.TRITON, False) and forward_batch_invariant(Kernel.REFERENCE, False)
    assert not forward_batch_invariant(Kernel.CUBLAS, True) and not forward_batch_invariant(Kernel.DEEP_GEMM, True)
    assert forward_batch_invariant(Kernel.CUBLAS_PINNED, False)
    assert forward_batch_invariant(None, True) and not forward_batch_invariant(None, False)


def test_linear_problems():
    assert linear_problems(JETRL, backward=True) == []
    assert linear_problems(replace(JETRL, grad_output=P["fp8_channel"]), backward=False) == []  # rollout: unused
    [weight] = linear_problems(replace(JETRL, weight=P["fp8_tensor"]), backward=True)
    assert weight.operand == "weight" and "128x128 blocks" in weight.message
    [experts] = linear_problems(JETRL, backward=True, experts=True)
    assert experts.operand == "module" and "rollout phase only" in experts.message
    assert linear_problems(JETRL, backward=False, experts=True) == []
    e5m2 = replace(JETRL, weight=replace(P["fp8_block_weight"], dtype=DType.FLOAT8_E5M2))
    assert linear_problems(e5m2, backward=True) == []
    assert [p.operand for p in linear_problems(e5m2, backward=False, exported=True)] == ["weight"]
    assert {p.operand for p in linear_problems(replace(e5m2, kernel=Kernel.CUBLAS), backward=True)} == {"kernel"}
