"""cuBLASLt's block-scaled FP8 GEMM with a pinned algorithm (`csrc/cublaslt_gemm.cpp`, built at first use).

torch._scaled_mm lets cuBLASLt's heuristic choose an algorithm per call, by M; this module asks the heuristic
once and then names the algorithm every call runs, so the choice is the caller's, not M's.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("csrc") / "cublaslt_gemm.cpp"
WORKSPACE_BYTES = 32 << 20  # what torch gives cuBLASLt on Hopper


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
    def config(self) -> tuple[int, ...]:
        """Everything but the table index: two entries with the same config are the same kernel."""
        return (self.algo_id, self.tile, self.split_k, self.reduction, self.swizzle, self.custom, self.stages,
                self.inner_shape, self.cluster_shape)


@functools.cache
def extension():
    """The compiled extension (torch.utils.cpp_extension; cached under TORCH_EXTENSIONS_DIR)."""
    from torch.utils.cpp_extension import load

    include_dirs, library = _cublaslt_files()
    return load(name="precision_engine_cublaslt", sources=[str(SOURCE)], extra_include_paths=include_dirs,
                extra_cflags=["-O2"], extra_ldflags=[library], with_cuda=True)


def _cublaslt_files() -> tuple[list[str], str]:
    """cublasLt.h's folder and the libcublasLt shared object: the CUDA toolkit's, else the nvidia wheels'."""
    from torch.utils.cpp_extension import CUDA_HOME

    roots = [Path(CUDA_HOME)] if CUDA_HOME else []
    for entry in sys.path:
        roots += sorted(Path(entry).glob("nvidia/cu*")) + [Path(entry) / "nvidia" / "cublas"]
    headers = [r / "include" for r in roots if (r / "include" / "cublasLt.h").is_file()]
    libraries = [lib for r in roots for sub in ("lib64", "lib") for lib in sorted((r / sub).glob("libcublasLt.so*"))]
    if not headers or not libraries:
        raise RuntimeError(f"cublasLt.h or libcublasLt.so not found under {', '.join(map(str, roots)) or '-'}")
    return [str(headers[0])], str(libraries[0])


@functools.cache
def workspace(device: torch.device) -> torch.Tensor:
    return torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)


def algorithms(x, x_scale, w, w_scale, w_blocks: bool, out, *, requested: int = 32) -> list[Algorithm]:
    """The heuristic's algorithms for this problem, best first (added to the extension's table)."""
    info = extension().algorithms(x, x_scale, w, w_scale, w_blocks, out, requested, WORKSPACE_BYTES)
    return [Algorithm(*map(int, row)) for row in info.tolist()]


def runs(algorithm: Algorithm, x, x_scale, w, w_scale, w_blocks: bool, out) -> bool:
    """Whether `algorithm` can run this problem within the workspace."""
    need = extension().workspace_needed(x, x_scale, w, w_scale, w_blocks, out, algorithm.index)
    return 0 <= need <= WORKSPACE_BYTES


def matmul(algorithm: Algorithm, x, x_scale, w, w_scale, w_blocks: bool, out) -> torch.Tensor:
    """out = dequant(x) @ dequant(w)^T with `algorithm`, on the current stream; returns out."""
    extension().matmul(x, x_scale, w, w_scale, w_blocks, out, algorithm.index, workspace(out.device))
    return out
