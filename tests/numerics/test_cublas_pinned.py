"""The pinned cuBLAS kernel's host side, on the CPU: which algorithm it pins, once per shape; what happens where
its extension does not build. The GEMM itself is tested on the GPU (tests/numerics/gpu/test_gemm_gpu.py)."""

import pytest
import torch

from precision_engine.errors import UnsupportedError
from precision_engine.numerics import cublas_pinned


class FakeExtension:
    """Offers `offered` config rows (split-K, reduction scheme, workspace), runs an algorithm at M where
    `runs_at` says so, and counts heuristic queries."""

    def __init__(self, offered, runs_at):
        self.offered, self.runs_at, self.queries = offered, runs_at, []

    def algorithms(self, x_scale, w_scale, m, n, k, x_dtype, w_dtype, out_dtype, w_blocks, requested, workspace):
        self.queries.append((m, n, k, w_blocks))
        rows = [[i, 66, 20, split, reduction, 0, 4, 36, 0, 3, ws] for i, (split, reduction, ws) in
                enumerate(self.offered)]
        return torch.tensor(rows, dtype=torch.int64).reshape(-1, 11)

    def workspace_needed(self, index, x_scale, w_scale, m, *problem):
        return self.offered[index][2] if m in self.runs_at[index] else -1


@pytest.fixture
def fake(monkeypatch):
    def install(offered, runs_at):
        ext = FakeExtension(offered, runs_at)
        monkeypatch.setattr(cublas_pinned, "extension", lambda: ext)
        monkeypatch.setattr(cublas_pinned, "_pinned", {})
        return ext
    return install


def _pin(n=4096, k=14336):
    scale = torch.ones(1)
    return cublas_pinned.pinned_algorithm(scale, scale, n, k, torch.float8_e4m3fn, torch.float8_e4m3fn,
                                          torch.bfloat16, True)


def test_pins_the_first_algorithm_without_split_k_that_runs_at_small_and_training_m(fake):
    every = (cublas_pinned.SMALL_M, cublas_pinned.PIN_M)
    ext = fake([(4, 2, 1 << 20), (1, 0, 0), (1, 0, 0), (1, 0, 0)],
               [every, (cublas_pinned.PIN_M,), every, every])  # split-K; training M only; the pick; a later one
    algo = _pin()
    assert algo.index == 2 and not algo.splits_k
    assert ext.queries == [(cublas_pinned.PIN_M, 4096, 14336, True)]  # asked at training size, whatever M calls
    assert _pin() is algo and len(ext.queries) == 1  # once per shape
    _pin(n=1024)
    assert len(ext.queries) == 2


def test_a_reduction_scheme_is_split_k_too(fake):
    every = (cublas_pinned.SMALL_M, cublas_pinned.PIN_M)
    fake([(1, 1, 0), (1, 0, 0)], [every, every])
    assert _pin().index == 1


def test_no_algorithm_without_split_k_is_an_error_naming_the_shape_and_the_way_out(fake):
    fake([(2, 2, 0)], [(cublas_pinned.SMALL_M, cublas_pinned.PIN_M)])
    with pytest.raises(UnsupportedError, match=r"no algorithm without split-K for a \[\*, 14336\] x \[4096, 14336\]"
                                               r"\^T .* use kernel: triton"):
        _pin()


def test_an_extension_that_does_not_build_is_an_unsupported_error_and_is_not_rebuilt(monkeypatch):
    import torch.utils.cpp_extension as cpp

    attempts = []

    def failing_load(**kwargs):
        attempts.append(kwargs["name"])
        raise RuntimeError("Error building extension 'precision_engine_cublaslt': g++ not found")

    monkeypatch.setattr(cpp, "load", failing_load)
    monkeypatch.setattr(cublas_pinned, "_cublaslt_files", lambda: (["/cuda/include"], "/cuda/lib64/libcublasLt.so"))
    cublas_pinned._build.cache_clear()
    try:
        for _ in range(2):
            with pytest.raises(UnsupportedError, match="cublas_pinned: its C\\+\\+ extension did not build here "
                                                       "\\(RuntimeError: .*g\\+\\+ not found\\).*use kernel: auto"):
                cublas_pinned.extension()
        assert attempts == ["precision_engine_cublaslt"]
    finally:
        cublas_pinned._build.cache_clear()


def test_the_headers_and_library_are_looked_for_in_the_toolkit_and_the_nvidia_wheels(monkeypatch, tmp_path):
    import sys

    import torch.utils.cpp_extension as cpp

    wheel = tmp_path / "nvidia" / "cu13"
    (wheel / "include").mkdir(parents=True)
    (wheel / "lib").mkdir()
    monkeypatch.setattr(cpp, "CUDA_HOME", str(tmp_path / "no-toolkit"))
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="no-toolkit"):
        cublas_pinned._cublaslt_files()
    (wheel / "include" / "cublasLt.h").write_text("")
    (wheel / "lib" / "libcublasLt.so.13").write_text("")
    assert cublas_pinned._cublaslt_files() == ([str(wheel / "include")], str(wheel / "lib" / "libcublasLt.so.13"))


@pytest.fixture
def hopper(monkeypatch):
    """A CPU stand-in for an H200 as gemm.py and triton_gemm.py see one (132 SMs, Gluon running where asked, the
    extension building where asked)."""
    from precision_engine.numerics import gemm, triton_gemm
    from precision_engine.numerics.capabilities import DeviceInfo

    def install(capability=(9, 0), gluon=True, builds=True):
        info = DeviceInfo("cuda", capability=capability, cublas_blockwise=True)
        monkeypatch.setattr(gemm, "device_info", lambda device: info)
        monkeypatch.setattr(cublas_pinned, "builds", lambda: builds)
        monkeypatch.setattr(triton_gemm, "_gluon_runs", lambda a, b: gluon)
        monkeypatch.setattr(triton_gemm, "_sm_count", lambda index: 132)
    return install


def _operands(m, n, k=256, weight_blocks=True):
    from precision_engine.numerics.formats import PRESET_FORMATS
    from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

    act = PRESET_FORMATS["fp8_group_act"]
    w = torch.randn(n, k) * 0.02
    wq = quantize_blocks(w, PRESET_FORMATS["fp8_block_weight"]) if weight_blocks else quantize_rows_1xG(w, act)
    return quantize_rows_1xG(torch.randn(m, k), act), wq


@pytest.mark.parametrize("m, n, gluon, expected", [
    (1, 4096, True, True), (15, 4096, True, True),  # under cuBLAS's 16-row minimum: padding copies avoided
    (1, 4096, False, True),  # there even without Gluon
    (16, 4096, True, True), (64, 6144, True, True),  # narrow weights: the Gluon chain launch
    (16, 14336, True, True), (64, 28672, True, True),  # whole 128-row tiles fill the SMs
    (64, 4096, False, False), (64, 28672, False, False), (65, 28672, True, False),  # no Gluon; prefill sizes
])
def test_which_rows_of_the_pinned_kernel_run_the_one_segment_launch(hopper, m, n, gluon, expected):
    from precision_engine.numerics import gemm

    hopper(gluon=gluon)
    a, b = _operands(m, n)
    assert gemm._pinned_bits_from_triton(a, b, 128) is expected


def test_the_one_segment_launch_is_measured_for_weight_blocks_on_hopper_only(hopper):
    from precision_engine.numerics import gemm

    a, b = _operands(1, 256, weight_blocks=False)  # the wgrad pair's 1x128 groups: not measured
    hopper()
    assert not gemm._pinned_bits_from_triton(a, b, 1)
    a, b = _operands(1, 256)
    hopper(capability=(10, 0))
    assert not gemm._pinned_bits_from_triton(a, b, 128)


def test_pinned_rows_under_16_are_the_one_segment_triton_launch(hopper):
    """Routed through fp8_gemm: the Triton kernel (the interpreter here) with seg_kb = every K block, never the
    extension; exactly that launch's bits, within FP32 rounding of the exact GEMM. (Gluon, which would take
    these rows on an H200, does not run on the CPU.)"""
    from precision_engine.numerics.formats import Kernel
    from precision_engine.numerics.gemm import fp8_gemm, reference_gemm
    from precision_engine.numerics.triton_gemm import block_scaled_gemm

    hopper(gluon=False)
    torch.manual_seed(5)
    a, b = _operands(3, 256, k=384)
    got = fp8_gemm(a, b, kernel=Kernel.CUBLAS_PINNED)
    one_chain = block_scaled_gemm(a.data, a.scale, b.data, b.scale, b_scale_rows=128, seg_kb=3)
    assert torch.equal(got, one_chain)
    exact = reference_gemm(a, b, out_dtype=torch.float64)
    got32 = fp8_gemm(a, b, kernel=Kernel.CUBLAS_PINNED, out_dtype=torch.float32)
    assert (got32.double() - exact).abs().max() <= 1e-5 * exact.abs().max()  # one FP32 chain over 3 blocks


@pytest.mark.parametrize("m, n, kernel, expected", [
    (65, 14336, "auto", True), (8192, 28672, "auto", True), (8192, 4096, "auto", True),  # above decode sizes
    (64, 28672, "auto", False), (64, 4096, "auto", False),  # decode sizes
    (8192, 28672, "triton", False),  # a policy naming the Triton kernel gets it
    (8192, 28672 + 64, "auto", False),  # cuBLAS would copy the weight to pad its rows, on every call
])
def test_auto_prefill_runs_pinned_cublas(hopper, monkeypatch, m, n, kernel, expected):
    """Operands of the 8B's shapes, never multiplied: the launches are stand-ins that say which ran."""
    from precision_engine.numerics import gemm, triton_gemm
    from precision_engine.numerics.formats import Kernel

    hopper()
    calls = []
    monkeypatch.setattr(gemm, "_cublas_gemm", lambda a, b, rows, out, pinned: calls.append(pinned) or "cublas")
    monkeypatch.setattr(triton_gemm, "block_scaled_gemm", lambda *args, **kwargs: "triton")
    a, b = _operands(1, 128)
    a = type(a)(torch.empty(m, 4096, dtype=torch.float8_e4m3fn), torch.ones(m, 32), a.fmt)
    b = type(b)(torch.empty(n, 4096, dtype=torch.float8_e4m3fn), torch.ones(-(-n // 128), 32), b.fmt)
    assert triton_gemm.segment_kb(n, 4096) == 32  # one K segment: pinned cuBLAS's sums
    assert gemm.fp8_gemm(a, b, kernel=Kernel(kernel)) == ("cublas" if expected else "triton")
    assert calls == ([True] if expected else [])


def test_auto_never_tries_pinned_cublas_where_its_extension_does_not_build(hopper):
    from precision_engine.numerics import gemm

    a, b = _operands(1, 128)
    a = type(a)(torch.empty(8192, 4096, dtype=torch.float8_e4m3fn), torch.ones(8192, 32), a.fmt)
    b = type(b)(torch.empty(28672, 4096, dtype=torch.float8_e4m3fn), torch.ones(224, 32), b.fmt)
    hopper(builds=False)
    assert not gemm._triton_bits_from_pinned(a, b, 128)
    hopper(builds=True)
    assert gemm._triton_bits_from_pinned(a, b, 128)


def test_auto_falls_back_to_triton_where_pinned_cublas_is_refused(hopper, monkeypatch):
    """No extension, or no algorithm without split-K: the Triton kernel's launch, the same bits, no error."""
    from precision_engine.numerics import gemm, triton_gemm

    hopper()

    def refused(*args, **kwargs):
        raise UnsupportedError("kernel cublas_pinned: its C++ extension did not build here")

    launched = []
    monkeypatch.setattr(gemm, "_cublas_gemm", refused)
    monkeypatch.setattr(gemm, "_triton_bits_from_pinned", lambda a, b, rows: True)
    monkeypatch.setattr(triton_gemm, "block_scaled_gemm", lambda *args, **kwargs: launched.append(1) or "triton")
    a, b = _operands(80, 256)
    assert gemm.fp8_gemm(a, b) == "triton" and launched == [1]


def test_a_shape_without_a_no_split_algorithm_is_asked_once(fake):
    fake([(2, 2, 0)], [(cublas_pinned.SMALL_M, cublas_pinned.PIN_M)])
    ext = cublas_pinned.extension()
    for _ in range(3):
        with pytest.raises(UnsupportedError, match="no algorithm without split-K"):
            _pin()
    assert len(ext.queries) == 1


@pytest.mark.parametrize("m, n, seg_kb, expected", [
    (1, 4096, None, True), (64, 6144, None, True), (16, 1024, None, True),  # narrow weights, one segment
    (1, 14336, None, True), (32, 28672, None, True),  # wide, up to WIDE_CHAIN_MAX_M tokens
    (33, 14336, None, False), (64, 28672, None, False),  # wide, above it: their whole-tile launches
    (16, 4096, 2, False),  # K split into segments by the caller: the split launch
    (65, 4096, None, False),  # above decode sizes
])
def test_which_decodes_run_the_chain_launch(hopper, monkeypatch, m, n, seg_kb, expected):
    """`triton_gemm.block_scaled_gemm`'s dispatch on a stand-in H200: the Gluon chain launch takes one-segment
    decode of weights under CHAIN_MAX_TILES 128-row tiles, and of wider ones at up to WIDE_CHAIN_MAX_M tokens.
    Launches are stand-ins that say which ran."""
    gluon_chain = pytest.importorskip("precision_engine.numerics.gluon_chain")
    from precision_engine.numerics import gluon_gemm, triton_gemm

    hopper()
    monkeypatch.setattr(gluon_chain, "gluon_chain_decode_gemm", lambda *args, **kwargs: "chain")
    monkeypatch.setattr(gluon_gemm, "gluon_block_scaled_gemm", lambda *args, **kwargs: "prefill")
    monkeypatch.setattr(triton_gemm, "_gluon_decode", lambda *args, **kwargs: "whole tiles")
    monkeypatch.setattr(triton_gemm, "_fp8_block_gemm_kernel", _NoLaunch())
    monkeypatch.setattr(triton_gemm, "_fp8_persistent_kernel", _NoLaunch())
    a = torch.empty(m, 512, dtype=torch.float8_e4m3fn)
    b = torch.empty(n, 512, dtype=torch.float8_e4m3fn)
    out = triton_gemm.block_scaled_gemm(a, torch.ones(m, 4), b, torch.ones(-(-n // 128), 4), b_scale_rows=128,
                                        seg_kb=seg_kb)
    assert (isinstance(out, str) and out == "chain") is expected


class _NoLaunch:
    """A Triton kernel stand-in: indexing gives a launcher that does nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None
