"""A thread's CUDA context made current before a launch whose TMA descriptors the host encodes.

Triton 3.6 encodes a launch's TMA descriptors with the driver (`cuTensorMapEncodeTiled`) before its launcher makes
the device's primary context current, and a thread has no current context until its first CUDA runtime call.
Autograd runs a CUDA backward on a device thread of its own. Where that thread's first CUDA work is a Gluon launch
(its first backward's allocations all hit torch's cache, and no cuBLAS call came first), the encoding fails with
"Failed to create tensor map descriptor: invalid device context" (H100, thirty-ninth session, BENCHMARKS.md).
DeepGEMM encodes its descriptors and launches through the driver as well. The check below is one driver call
where a context is current, and makes no runtime call, so it is legal while a stream captures a graph.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from precision_engine.errors import UnsupportedError


def make_context_current(device: torch.device) -> None:
    """Make `device`'s primary context current on this thread where no context is; nothing where one is, or off
    CUDA (Triton's interpreter takes TMA descriptors on the CPU)."""
    if device.type != "cuda":
        return
    driver = _driver()
    current = ctypes.c_void_p()
    _check(driver.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent")
    if current.value:
        return
    ordinal = ctypes.c_int()
    index = device.index if device.index is not None else torch.cuda.current_device()
    _check(driver.cuDeviceGet(ctypes.byref(ordinal), index), "cuDeviceGet")
    primary = ctypes.c_void_p()
    _check(driver.cuDevicePrimaryCtxRetain(ctypes.byref(primary), ordinal), "cuDevicePrimaryCtxRetain")
    _check(driver.cuCtxSetCurrent(primary), "cuCtxSetCurrent")


@functools.cache
def _driver() -> ctypes.CDLL:
    """The CUDA driver library torch has loaded (torch initialised it: no cuInit here)."""
    return ctypes.CDLL("libcuda.so.1")


def _check(status: int, call: str) -> None:
    if status != 0:
        raise UnsupportedError(f"CUDA driver {call} failed with CUresult {status} while making a context current")
