"""`numerics.elf`: the NEEDED libraries of an ELF file, read without binutils, and what `gemm` does with them:
a DeepGEMM whose host module carries its own static libstdc++ (its first GEMM crashed the process on the H200
image) is refused with a warning, before AUTO ever launches it; `scripts/build_deep_gemm.py` fails on such a build.

The C++ pair is built here with g++ (skipped without one): the same source linked with the process's libstdc++
and with -static-libstdc++.
"""

import os
import shutil
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch

from precision_engine.numerics import elf, gemm

CXX_SOURCE = ('#include <regex>\n'
              'extern "C" int matches(const char* s) { return std::regex_match(s, std::regex("a+")); }\n')
TORCH_LIB = Path(torch.__file__).parent / "lib"


@pytest.fixture(scope="module")
def cxx_pair(tmp_path_factory):
    """(dynamic, static): one C++ shared object linking libstdc++ dynamically, one with it built in."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    root = tmp_path_factory.mktemp("cxx")
    (root / "m.cpp").write_text(CXX_SOURCE)
    built = []
    for name, flags in (("dynamic.so", []), ("static.so", ["-static-libstdc++", "-static-libgcc"])):
        done = subprocess.run(["g++", "-shared", "-fPIC", "-O1", *flags, "-o", str(root / name), str(root / "m.cpp")],
                              capture_output=True, text=True)
        if done.returncode:  # e.g. no libstdc++.a for the static build
            pytest.skip(f"g++ {' '.join(flags)} failed: {done.stderr.strip()[:200]}")
        built.append(root / name)
    return tuple(built)


def test_needed_libraries_agree_with_what_the_loader_reads():
    """torch's own libraries: libtorch_cpu takes libstdc++ from the process; a C extension of Python's takes libc
    alone."""
    needed = elf.needed_libraries(TORCH_LIB / "libtorch_cpu.so")
    assert "libc10.so" in needed and any(n.startswith("libstdc++.so") for n in needed)
    assert elf.links_cxx_runtime(TORCH_LIB / "libtorch_cpu.so")
    import _struct

    if _struct.__file__:  # a built-in module on some Pythons
        assert not elf.links_cxx_runtime(_struct.__file__)


def test_a_static_libstdcxx_build_is_told_from_a_dynamic_one(cxx_pair):
    dynamic, static = cxx_pair
    assert any(n.startswith("libstdc++.so") for n in elf.needed_libraries(dynamic))
    assert elf.links_cxx_runtime(dynamic) and not elf.links_cxx_runtime(static)
    assert "libc.so.6" in elf.needed_libraries(static)


@pytest.mark.parametrize("damage", ["not_elf", "32_bit", "truncated", "empty"])
def test_what_is_not_a_readable_elf_file_raises_value_error(tmp_path, damage):
    good = (TORCH_LIB / "libtorch_global_deps.so").read_bytes()
    data = {"not_elf": b"#!/bin/sh\n", "32_bit": good[:4] + b"\x01" + good[5:], "truncated": good[:200],
            "empty": b""}[damage]
    path = tmp_path / "lib.so"
    path.write_bytes(data)
    with pytest.raises(ValueError, match="lib.so"):
        elf.needed_libraries(path)


@pytest.fixture
def installed_deep_gemm(monkeypatch):
    """Install a stand-in deep_gemm whose host module is the file given; returns deep_gemm_available's answer
    and its warnings."""

    def install(module_file):
        fake = types.ModuleType("deep_gemm")
        fake.fp8_gemm_nt = lambda *args: None
        if module_file is not None:
            fake._C = types.SimpleNamespace(__file__=str(module_file))
        monkeypatch.setitem(sys.modules, "deep_gemm", fake)
        gemm.deep_gemm_available.cache_clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            available = gemm.deep_gemm_available()
        gemm.deep_gemm_available.cache_clear()
        return available, [str(w.message) for w in caught]

    yield install
    gemm.deep_gemm_available.cache_clear()


def test_deep_gemm_with_its_own_static_libstdcxx_is_refused_with_a_warning(installed_deep_gemm, cxx_pair):
    dynamic, static = cxx_pair
    assert installed_deep_gemm(dynamic) == (True, [])
    available, said = installed_deep_gemm(static)
    assert not available and len(said) == 1
    assert str(static) in said[0] and "libstdc++" in said[0] and "scripts/build_deep_gemm.py" in said[0]


def test_deep_gemm_whose_module_cannot_be_read_stays_available(installed_deep_gemm, tmp_path):
    """Nothing known against it: a module file that is not ELF (another platform), or none to find."""
    (tmp_path / "_C.so").write_bytes(b"not an ELF file")
    assert installed_deep_gemm(tmp_path / "_C.so") == (True, [])
    assert installed_deep_gemm(tmp_path / "missing.so") == (True, [])
    assert installed_deep_gemm(None) == (True, [])


def _build_script(*args):
    return subprocess.run([sys.executable, "scripts/build_deep_gemm.py", *map(str, args)], capture_output=True,
                          text=True, cwd=Path(__file__).parents[2], env={**os.environ, "PYTHONPATH": "."})


def test_build_script_refuses_a_missing_source_or_submodules_in_one_line(tmp_path):
    done = _build_script(tmp_path / "nowhere", "--into", tmp_path / "out")
    assert done.returncode == 2 and "nowhere: no such checkout or tarball" in done.stderr
    checkout = tmp_path / "DeepGEMM"
    (checkout / "deep_gemm" / "include").mkdir(parents=True)
    done = _build_script(checkout, "--into", tmp_path / "out")
    assert done.returncode == 2 and "clone with --recursive" in done.stderr and "Traceback" not in done.stderr
