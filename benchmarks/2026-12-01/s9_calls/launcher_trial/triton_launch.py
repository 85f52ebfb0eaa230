"""Triton launches without Triton's per-call binding, because launches are most of a training step's host time.

`launch(kernel, grid, *args, **kwargs)` does what `kernel[grid](*args, **kwargs)` does. The first call of each
specialization goes through Triton, which compiles the kernel or finds it in its cache. Later calls with the same
key hand their arguments straight to that compiled kernel's launcher. They skip Triton's binder, its cache-key
hash, its global-value check and its launch metadata.

The key is at least as fine as Triton 3.6's own specialization, so a hit runs the kernel Triton would pick:
- a tensor: its dtype and whether its address is 16-byte aligned;
- an int: whether it is 1, whether it divides by 16, and whether it fits 32 or 64 bits;
- a TMA descriptor: its dtype, block shape, layout and padding;
- a constexpr: its value; and the launch options (num_warps, ...) by value.
An argument of any other kind, launch hooks (a profiler's), tracing by torch.compile (which captures the
`kernel[grid]` call itself), the interpreter and any Triton release but the one checked take Triton's own path.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import torch
import triton

CHECKED_TRITON = (3, 6)
_TRITON = tuple(int(part) for part in triton.__version__.split(".")[:2])
_INT32, _INT64 = 2**31, 2**63


def direct_launches() -> bool:
    """Whether `launch` may bypass Triton's binding here: the checked release, compiled (not interpreted)."""
    return _TRITON == CHECKED_TRITON and os.environ.get("TRITON_INTERPRET") != "1"


class _Kernel:
    """One kernel's parameter order and its compiled kernels by specialization key."""

    def __init__(self, kernel) -> None:
        self.names = [p.name for p in kernel.params]
        self.constexpr = [p.is_constexpr for p in kernel.params]
        self.defaults = [p.default for p in kernel.params]
        self.parameters = set(self.names)
        self.compiled: dict[tuple, Any] = {}


_KERNELS: dict[Any, _Kernel] = {}
_UNKEYED = object()
_MISSING = inspect.Parameter.empty


def argument_key(value: Any, constexpr: bool) -> Any:
    """What Triton specializes one argument on (or finer); `_UNKEYED` for a kind this module does not key."""
    if constexpr:
        return ("c", value)
    if isinstance(value, torch.Tensor):
        return (value.dtype, value.data_ptr() % 16 == 0)
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        width = 32 if -_INT32 <= value < _INT32 else 64 if -_INT64 <= value < _INT64 else 65
        return (value == 1, value % 16 == 0, width)
    if isinstance(value, float):
        return float
    if value is None:
        return None
    base = getattr(value, "base", None)
    if isinstance(base, torch.Tensor) and hasattr(value, "layout"):  # a Gluon TensorDescriptor
        return (type(value), base.dtype, tuple(value.block_shape), value.layout, value.padding)
    return _UNKEYED


def launch(kernel, grid: tuple, *args, **kwargs) -> None:
    """`kernel[grid](*args, **kwargs)`, through the compiled kernel directly once this specialization ran."""
    hooks = triton.knobs.runtime
    if (not direct_launches() or torch.compiler.is_compiling() or _hooked(hooks.launch_enter_hook)
            or _hooked(hooks.launch_exit_hook)):
        kernel[grid](*args, **kwargs)
        return
    key, compiled, values = lookup(kernel, args, kwargs)
    if compiled is None:  # Triton's own path: compiles, or finds, the kernel (and raises on bad arguments)
        compiled = kernel[grid](*args, **kwargs)
        if key is not None and compiled is not None:
            _KERNELS[kernel].compiled[key] = compiled
        return
    stream = triton.runtime.driver.active.get_current_stream(key[0])
    grid = (*grid, 1, 1)
    compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata, None, None, None,
                 *values)


def _hooked(hook) -> bool:
    """Whether a launch hook is installed (Triton 3.6 keeps an empty `HookChain` where none is)."""
    return hook is not None and bool(getattr(hook, "calls", True))


def lookup(kernel, args: tuple, kwargs: dict) -> tuple[tuple | None, Any, list]:
    """(this call's specialization key, the compiled kernel cached under it or None, every parameter's value in
    order as that kernel's launcher takes them); the key is None where an argument is missing, of a kind not
    keyed, or unhashable."""
    info = _KERNELS.get(kernel)
    if info is None:
        info = _KERNELS[kernel] = _Kernel(kernel)
    values = list(args)
    values += [kwargs.get(name, default) for name, default in zip(info.names[len(args):], info.defaults[len(args):])]
    options = tuple(sorted((name, value) for name, value in kwargs.items() if name not in info.parameters))
    key = [torch.cuda.current_device(), options]
    for value, constexpr in zip(values, info.constexpr):
        part = argument_key(value, constexpr)
        if part is _UNKEYED or value is _MISSING:
            return None, None, values
        key.append(part)
    key = tuple(key)
    try:
        return key, info.compiled.get(key), values
    except TypeError:  # an unhashable constexpr or option
        return None, None, values
