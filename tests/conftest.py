"""Test-wide set-up.

Without a GPU, Triton kernels run in Triton's CPU interpreter. TRITON_INTERPRET must be set before any kernel
is decorated (i.e. before our kernel modules are imported), so it is set here, first; so is OpenBLAS's thread
count, which the interpreter's bitwise tests depend on (below).
"""

import os

# The interpreter's tl.dot is numpy's matmul. With several threads OpenBLAS may split a small product's sum
# differently for different tile shapes, so one kernel's launches would differ in the last bit on the CPU where
# the GPU's fixed K order gives one set of bits (seen on a 2-core AMD EPYC: the invariant linear's prefixes).
# One thread sums in one order; it must be set before numpy (imported by torch) loads OpenBLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

try:
    import torch

    _has_cuda = torch.cuda.is_available()
except ImportError:  # the policy/CLI tests run without torch too
    _has_cuda = False

if not _has_cuda:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not _has_cuda:
            item.add_marker(skip_gpu)


@pytest.fixture
def tmp_policy(tmp_path):
    """Write a policy file and return its path: tmp_policy("name.yaml", "yaml text")."""

    def write(name: str, text: str):
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
