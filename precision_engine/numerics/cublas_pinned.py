"""The batch-invariant cuBLAS kernel: cuBLASLt's block-scaled FP8 GEMM with one algorithm pinned per shape.

torch._scaled_mm lets cuBLASLt's heuristic pick an algorithm on every call, by M; at decode sizes with a long K
it picks split-K, and a row's bits change with the batch. Here the heuristic is asked once per problem shape
(N, K, dtypes, scale layout) for `PIN_M` rows; the first algorithm it offers with no split-K that also runs at
`SMALL_M` rows is pinned, and every call of that shape runs it. A row's additions (K order, the promotion of
each 128-wide K block's partial sum, one kernel) then no longer depend on M.

Measured on an H200 (cuBLAS 13, fourteenth session; BENCHMARKS.md): the pinned algorithm's rows are bitwise
equal at M = 1 .. 16384 on the 8B shapes (the GPU tests and the probe), every no-split algorithm the heuristic
offered gave the same bits, and the GEMM runs 1.58-1.72x BF16 at 8192 tokens where the Triton kernel runs
1.22-1.45x. Its additions are one FP32 chain, chain = fma(block product, sa * sb, chain) per 128-wide K block:
the Triton and Gluon kernels with a single K segment give exactly its bits (fifteenth session), so
`gemm.fp8_gemm` runs them instead where they are faster (`gemm._pinned_bits_from_triton`: under 16 rows, and
at decode sizes where a Gluon launch takes the shape). Since the sixteenth session AUTO's Triton kernel has one
K segment for every weight (`triton_gemm.segment_kb`), so AUTO's bits are this kernel's (measured for 128x128
weight blocks on Hopper), and AUTO's prefill and training forward run here (`gemm._triton_bits_from_pinned`).

The extension (`csrc/cublaslt_gemm.cpp`) builds at first use with torch.utils.cpp_extension (about 25 s on
the H200 image, then cached in TORCH_EXTENSIONS_DIR); it needs a host C++ compiler and cuBLASLt's headers
(the CUDA toolkit's, or the nvidia-cublas wheel's). A failed build is tried once per process and raised as an
UnsupportedError on every call that needs it.
"""

from __future__ import annotations

import functools
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from precision_engine.errors import UnsupportedError

SOURCE = Path(__file__).with_name("csrc") / "cublaslt_gemm.cpp"
PIN_M = 8192  # the heuristic is asked for training-sized problems: where the GEMM's time is
SMALL_M = 16  # the pinned algorithm must also run here (decode sizes, after gemm.py pads M to 16)
WORKSPACE_BYTES = 32 << 20  # the most a pinned algorithm may ask for (what torch gives cuBLASLt on Hopper)
_CANDIDATES = 16


@dataclass(frozen=True)
class Algorithm:
    """One cuBLASLt algorithm as the heuristic described it; `index` names it in the extension's table."""

    index: int
    algo_id: int
    tile: int
    split_k: int
    reduction: int
    swizzle: int
    custom: int
    stages: int
    inner_shape: int
    cluster_shape: int
    workspace: int

    @property
    def splits_k(self) -> bool:
        return self.split_k > 1 or self.reduction != 0


def extension():
    """The compiled extension (torch.utils.cpp_extension, cached on disk); UnsupportedError where it does not
    build, saying why."""
    built, error = _build()
    if error is not None:
        raise UnsupportedError(f"kernel cublas_pinned: its C++ extension did not build here ({error}); it needs a "
                               "host C++ compiler and cuBLASLt's headers; use kernel: auto")
    return built


def builds() -> bool:
    """Whether the extension builds here (built at the first ask, as `extension` would)."""
    return _build()[1] is None


@functools.cache
def _build():
    """(module, None), or (None, the reason): a failure is remembered, not retried on every GEMM."""
    from torch.utils.cpp_extension import load

    try:
        include_dirs, library = _cublaslt_files()
        return load(name="precision_engine_cublaslt", sources=[str(SOURCE)], extra_include_paths=include_dirs,
                    extra_cflags=["-O2"], extra_ldflags=[library], with_cuda=True), None
    except Exception as err:  # noqa: BLE001 (any failed build means the same to the caller)
        return None, f"{type(err).__name__}: {str(err)[:400]}"


def _cublaslt_files() -> tuple[list[str], str]:
    """cublasLt.h's folder and the libcublasLt shared object: the CUDA toolkit's, else the nvidia wheels'."""
    from torch.utils.cpp_extension import CUDA_HOME

    roots = [Path(CUDA_HOME)] if CUDA_HOME else []
    for entry in sys.path:
        roots += sorted(Path(entry or ".").glob("nvidia/cu*")) + [Path(entry or ".") / "nvidia" / "cublas"]
    headers = [r / "include" for r in roots if (r / "include" / "cublasLt.h").is_file()]
    libraries = [lib for r in roots for sub in ("lib64", "lib") for lib in sorted((r / sub).glob("libcublasLt.so*"))]
    if not headers or not libraries:
        raise FileNotFoundError(f"cublasLt.h or libcublasLt.so under none of {', '.join(map(str, roots)) or '-'}")
    return [str(headers[0])], str(libraries[0])


_pinned: dict[tuple, Algorithm | UnsupportedError] = {}
_pin_lock = threading.Lock()


def pinned_algorithm(x_scale: torch.Tensor, w_scale: torch.Tensor, n: int, k: int, x_dtype: torch.dtype,
                     w_dtype: torch.dtype, out_dtype: torch.dtype, w_blocks: bool) -> Algorithm:
    """The algorithm every [*, k] x [n, k]^T problem of these dtypes and scale layout runs (chosen once per
    process: the heuristic's first no-split answer for PIN_M rows that also runs at SMALL_M rows); an
    UnsupportedError, also remembered, where there is none."""
    key = (w_scale.device, n, k, x_dtype, w_dtype, out_dtype, w_blocks)
    found = _pinned.get(key)
    if found is None:
        with _pin_lock:
            if key not in _pinned:
                try:
                    _pinned[key] = _choose(x_scale, w_scale, n, k, x_dtype, w_dtype, out_dtype, w_blocks)
                except UnsupportedError as err:  # remembered: AUTO falls back per call, never asks again
                    _pinned[key] = err
        found = _pinned[key]
    if isinstance(found, UnsupportedError):
        raise UnsupportedError(str(found))
    return found


def _choose(x_scale, w_scale, n, k, x_dtype, w_dtype, out_dtype, w_blocks) -> Algorithm:
    ext = extension()
    problem = (n, k, x_dtype, w_dtype, out_dtype, w_blocks)
    offered = [Algorithm(*map(int, row)) for row in ext.algorithms(
        x_scale, w_scale, PIN_M, *problem, _CANDIDATES, WORKSPACE_BYTES).tolist()]
    for algo in offered:
        if algo.splits_k:
            continue
        needs = [ext.workspace_needed(algo.index, x_scale, w_scale, m, *problem) for m in (SMALL_M, PIN_M)]
        if all(0 <= need <= WORKSPACE_BYTES for need in needs):
            return replace(algo, workspace=max(algo.workspace, *needs))
    raise UnsupportedError(f"cuBLASLt offers no algorithm without split-K for a [*, {k}] x [{n}, {k}]^T FP8 GEMM "
                           f"({x_dtype} x {w_dtype} -> {out_dtype}) that runs at {SMALL_M} and {PIN_M} rows; "
                           "use kernel: triton")


@functools.cache
def _no_workspace(device: torch.device) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=device)


def gemm(x: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor, *, w_blocks: bool,
         out_dtype: torch.dtype) -> torch.Tensor:
    """dequant(x) @ dequant(w)^T on the pinned algorithm. Operands as `gemm._cublas_operands` lays them out:
    M a multiple of 16, ceil(K/128) a multiple of 4, scales in torch._scaled_mm's layouts."""
    m, k = x.shape
    n = w.shape[0]
    algo = pinned_algorithm(x_scale, w_scale, n, k, x.dtype, w.dtype, out_dtype, w_blocks)
    out = torch.empty((m, n), dtype=out_dtype, device=x.device)
    # From the caching allocator where the algorithm uses one (stream-ordered, so concurrent streams never share
    # it), at the full allowance: another M may need more than 16 or 8192 rows did.
    workspace = (torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=x.device) if algo.workspace
                 else _no_workspace(x.device))
    extension().matmul(algo.index, x, x_scale, w, w_scale, w_blocks, out, workspace)
    return out
