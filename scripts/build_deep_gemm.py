"""Build DeepGEMM's host module for AUTO's Hopper GEMMs (README "DeepGEMM"): no wheel of its 2.x API exists.

    python scripts/build_deep_gemm.py SOURCE --into DIR      # then: export PYTHONPATH=DIR:$PYTHONPATH

SOURCE is a DeepGEMM checkout with its submodules (`git clone --recursive`), or a .tar.gz of one (one top-level
folder). Measured at deepseek-ai/DeepGEMM 54e2261 (2.6.1; CUTLASS f3fde58, fmt 553ec11). DIR is replaced.
Only the host module (`deep_gemm._C`, csrc/python_api.cpp) is built here, with torch's extension builder
(about 50 s on the H200 machine, MAX_JOBS=8); DeepGEMM compiles each kernel with NVCC at its first call (cached
under DG_JIT_CACHE_DIR). Headers and libraries come from the CUDA toolkit, else from the nvidia wheels
(nvrtc, cuBLASLt).

The module must take libstdc++ from the process: the build honours CXX, and a g++ that links it statically
(the H200 image's /opt/gcc) gives a module whose first GEMM crashes the process. The script checks the result
and fails (exit 2) on such a build, naming the compiler to change; `gemm.deep_gemm_available` refuses one too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from precision_engine.numerics.elf import links_cxx_runtime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a DeepGEMM checkout with submodules, or a .tar.gz of one")
    parser.add_argument("--into", type=Path, required=True, help="where deep_gemm/ is built (replaced)")
    parser.add_argument("--cflags", default="", help="extra host compiler flags")
    args = parser.parse_args(argv)
    start = time.time()
    try:
        module = _build(_unpack(args.source, args.into), args.cflags.split())
    except (FileNotFoundError, subprocess.CalledProcessError, RuntimeError) as err:  # RuntimeError: the compiler's
        print(f"build_deep_gemm: {err}", file=sys.stderr)
        return 2
    if not links_cxx_runtime(module):
        print(f"build_deep_gemm: {module} links libstdc++ statically (compiler: {os.environ.get('CXX', 'c++')}); "
              "its first GEMM would crash the process. Set CXX to a g++ that links it dynamically "
              "(on the H200 image: CXX=/usr/bin/g++) and build again.", file=sys.stderr)
        return 2
    print(f"built {module} in {time.time() - start:.0f} s; export PYTHONPATH={args.into}:$PYTHONPATH")
    return 0


def _unpack(source: Path, into: Path) -> Path:
    """`into` holding the checkout's files, CUTLASS's cute/ and cutlass/ headers linked where DeepGEMM's JIT
    looks for them (deep_gemm/include)."""
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such checkout or tarball")
    if into.exists():
        shutil.rmtree(into)
    if source.is_dir():
        shutil.copytree(source, into, ignore=shutil.ignore_patterns(".git"))
    else:
        into.mkdir(parents=True)
        subprocess.run(["tar", "xzf", str(source), "-C", str(into), "--strip-components=1"], check=True)
    include = into / "deep_gemm" / "include"
    for sub in ("cute", "cutlass"):
        header_root = into / "third-party" / "cutlass" / "include" / sub
        if not header_root.is_dir():
            raise FileNotFoundError(f"{header_root}: missing (clone with --recursive, or run "
                                    "`git submodule update --init --recursive`)")
        (include / sub).unlink(missing_ok=True)
        (include / sub).symlink_to(header_root)
    return into


def _build(root: Path, cflags: list[str]) -> Path:
    from torch.utils.cpp_extension import CUDA_HOME, load

    nvrtc_h, cublaslt_h = _find("nvrtc.h", "header"), _find("cublasLt.h", "header")
    libraries = [_find("libnvrtc.so*", "lib"), _find("libcublasLt.so*", "lib")]
    build = root.with_name(root.name + "_build")
    build.mkdir(exist_ok=True)
    load(name="_C", sources=[str(root / "csrc" / "python_api.cpp")],
         extra_include_paths=[str(root / "deep_gemm" / "include"), str(root / "third-party" / "fmt" / "include"),
                              str(nvrtc_h.parent), str(cublaslt_h.parent), f"{CUDA_HOME}/include/cccl"],
         extra_cflags=["-O3", "-std=c++17", "-Wno-psabi", "-Wno-deprecated-declarations", *cflags],
         extra_ldflags=[str(p) for p in libraries], build_directory=str(build), with_cuda=True,
         is_python_module=False, verbose=False)
    module = root / "deep_gemm" / "_C.so"
    shutil.copy(build / "_C.so", module)
    return module


def _find(name: str, kind: str) -> Path:
    """`name` (a glob) under the CUDA toolkit, else under the nvidia wheels on sys.path."""
    from torch.utils.cpp_extension import CUDA_HOME

    roots = [Path(CUDA_HOME)] if CUDA_HOME else []
    for entry in sys.path:
        roots += sorted(Path(entry or ".").glob("nvidia/cu*")) + sorted(Path(entry or ".").glob("nvidia/*"))
    subdirs = ("include",) if kind == "header" else ("lib64", "lib")
    for root in roots:
        for sub in subdirs:
            hits = sorted((root / sub).glob(name))
            if hits:
                return hits[0]
    raise FileNotFoundError(f"{name}: under none of {[str(r) for r in roots]} (install the CUDA toolkit)")


if __name__ == "__main__":
    os.environ.setdefault("MAX_JOBS", "8")
    sys.exit(main())
