"""Build DeepGEMM (deepseek-ai/DeepGEMM at 54e2261, CUTLASS f3fde58, fmt 553ec11: the submodule pins) from a source
tarball (argv[1], default `.dg/deepgemm_src.tar.gz`; one top-level folder holding the checkout and its
third-party/ submodules) into DG_ROOT (default /tmp/dg, REPLACED if it exists), importable as `deep_gemm` with
PYTHONPATH=$DG_ROOT. The device image has no DeepGEMM wheel and SGLang's `sgl-deep-gemm` does not load on torch 2.11.

Only the host module (`deep_gemm._C`, csrc/python_api.cpp) is built here; DeepGEMM compiles each kernel with NVCC
at its first call (JIT, cached under DG_JIT_CACHE_DIR). Headers and libraries: the CUDA toolkit's, else the
nvidia wheels' (nvrtc, cuBLASLt), found as `cublas_pinned` finds cuBLASLt. Build with CXX set to a g++ that links
libstdc++ dynamically (/usr/bin/g++ on the H200 image): the image's default links it statically, and that copy's
std::regex crashed DeepGEMM's first GEMM (eighteenth session, calls 1-3). DG_CFLAGS: extra compiler flags.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".dg/deepgemm_src.tar.gz")
ROOT = Path(os.environ.get("DG_ROOT", "/tmp/dg"))  # another root builds a variant (DG_CFLAGS) beside


def find(name: str, kind: str) -> Path:
    from torch.utils.cpp_extension import CUDA_HOME

    roots = [Path(CUDA_HOME)] if CUDA_HOME else []
    for entry in sys.path:
        roots += sorted(Path(entry or ".").glob("nvidia/cu*")) + sorted(Path(entry or ".").glob("nvidia/*"))
    subs = ("include",) if kind == "header" else ("lib64", "lib")
    for r in roots:
        for sub in subs:
            hits = sorted((r / sub).glob(name))
            if hits:
                return hits[0]
    raise FileNotFoundError(f"{name} under none of {roots}")


def main():
    start = time.time()
    if ROOT.exists():
        shutil.rmtree(ROOT)
    ROOT.mkdir(parents=True)
    subprocess.run(["tar", "xzf", str(SRC), "-C", str(ROOT), "--strip-components=1"], check=True)
    inc = ROOT / "deep_gemm" / "include"
    for sub in ("cute", "cutlass"):
        (inc / sub).symlink_to(ROOT / "third-party" / "cutlass" / "include" / sub)
    from torch.utils.cpp_extension import CUDA_HOME, load

    nvrtc_h, cublaslt_h = find("nvrtc.h", "header"), find("cublasLt.h", "header")
    libs = [find("libnvrtc.so*", "lib"), find("libcublasLt.so*", "lib")]
    print("CUDA_HOME", CUDA_HOME, "nvrtc.h", nvrtc_h, "libs", libs, flush=True)
    build = Path(f"{ROOT}_build")
    build.mkdir(exist_ok=True)
    load(name="_C", sources=[str(ROOT / "csrc" / "python_api.cpp")],
         extra_include_paths=[str(inc), str(ROOT / "third-party" / "fmt" / "include"), str(nvrtc_h.parent),
                              str(cublaslt_h.parent), f"{CUDA_HOME}/include/cccl"],
         extra_cflags=["-O3", "-std=c++17", "-Wno-psabi", "-Wno-deprecated-declarations", *os.environ.get("DG_CFLAGS", "").split()],
         extra_ldflags=[str(p) for p in libs], build_directory=str(build), with_cuda=True,
         is_python_module=False, verbose=False)
    shutil.copy(build / "_C.so", ROOT / "deep_gemm" / "_C.so")
    print(f"built deep_gemm._C in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("MAX_JOBS", "8")
    main()
