"""The direct launcher's specialization key (CPU): every distinction Triton 3.6 specializes on separates keys."""

from __future__ import annotations

import torch

from precision_engine.numerics import triton_launch as L


def test_int_keys_separate_one_divisible_by_16_and_width():
    keys = {v: L.argument_key(v, False) for v in (1, 2, 16, 17, 32, 2**31 - 16, 2**31, 2**40, -(2**31) - 1, 2**63)}
    assert keys[16] == keys[32] and keys[2] == keys[17]  # same specialization: one kernel
    assert len({keys[1], keys[2], keys[16]}) == 3  # == 1 is a constant in Triton, % 16 an attribute
    assert keys[2**31 - 16] != keys[2**31]  # i32 against i64
    assert keys[-(2**31) - 1] != keys[17] and keys[2**63] != keys[2**40]  # i64 below, u64 above


def test_tensor_keys_separate_dtype_and_16_byte_alignment():
    x = torch.zeros(64, dtype=torch.bfloat16)
    assert L.argument_key(x, False) == L.argument_key(x[8:], False)  # 16 bytes further: still aligned
    assert L.argument_key(x, False) != L.argument_key(x[1:], False)  # 2 bytes further: not
    assert L.argument_key(x, False) != L.argument_key(x.view(torch.int16), False)


def test_bools_constexprs_and_unknown_kinds():
    assert L.argument_key(True, False) != L.argument_key(1, False) != L.argument_key(False, False)
    assert L.argument_key(128, True) != L.argument_key(64, True)  # a constexpr keys on its value
    assert L.argument_key(0.5, False) == L.argument_key(2.0, False)  # runtime floats: never specialized
    assert L.argument_key(object(), False) is L._UNKEYED  # unknown kinds take Triton's own path


def test_launch_without_direct_launches_is_triton_call(monkeypatch):
    """Off the checked release (or interpreted), `launch` is exactly kernel[grid](...)."""
    calls = []

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append((grid, args, kwargs))

    monkeypatch.setattr(L, "direct_launches", lambda: False)
    L.launch(Kernel(), (3, 2), 1, "a", BLOCK=4, num_warps=2)
    assert calls == [((3, 2), (1, "a"), {"BLOCK": 4, "num_warps": 2})]


def test_a_launch_hook_means_tritons_path():
    """A profiler's hook (Triton 3.6: a non-empty HookChain) needs Triton's launch metadata: no direct launch."""

    class Chain:
        def __init__(self, calls):
            self.calls = calls

    assert not L._hooked(None) and not L._hooked(Chain([]))
    assert L._hooked(Chain([print])) and L._hooked(print)
