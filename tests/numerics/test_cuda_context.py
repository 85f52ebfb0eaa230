"""`cuda_context.make_context_current` against a stand-in CUDA driver: it asks for the current context, and only
where a thread has none does it retain the device's primary context and make it current; a failing driver call
is an error that names the call. Off CUDA it calls nothing. (On a GPU: tests/numerics/gpu/test_cuda_context_gpu.py.)"""

import ctypes

import pytest
import torch

from precision_engine.errors import UnsupportedError
from precision_engine.numerics import cuda_context

PRIMARY = 0x5000


class FakeDriver:
    def __init__(self, current: int = 0, fail: str | None = None):
        self.current, self.fail, self.calls = current, fail, []

    def _status(self, name):
        self.calls.append(name)
        return 1 if name == self.fail else 0

    def cuCtxGetCurrent(self, out):
        out._obj.value = self.current or None
        return self._status("cuCtxGetCurrent")

    def cuDeviceGet(self, out, index):
        out._obj.value = index
        self.ordinal = index
        return self._status("cuDeviceGet")

    def cuDevicePrimaryCtxRetain(self, out, ordinal):
        assert ordinal.value == self.ordinal
        out._obj.value = PRIMARY
        return self._status("cuDevicePrimaryCtxRetain")

    def cuCtxSetCurrent(self, ctx):
        assert isinstance(ctx, ctypes.c_void_p) and ctx.value == PRIMARY
        self.current = ctx.value
        return self._status("cuCtxSetCurrent")


@pytest.fixture
def driver(monkeypatch):
    def install(**kw):
        fake = FakeDriver(**kw)
        monkeypatch.setattr(cuda_context, "_driver", lambda: fake)
        return fake
    return install


def test_a_thread_with_a_context_keeps_it(driver):
    fake = driver(current=0x1234)
    cuda_context.make_context_current(torch.device("cuda", 1))
    assert fake.calls == ["cuCtxGetCurrent"] and fake.current == 0x1234


def test_a_thread_without_one_gets_the_devices_primary_context(driver):
    fake = driver()
    cuda_context.make_context_current(torch.device("cuda", 1))
    assert fake.calls == ["cuCtxGetCurrent", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent"]
    assert fake.ordinal == 1 and fake.current == PRIMARY


@pytest.mark.parametrize("call", ["cuCtxGetCurrent", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent"])
def test_a_failing_driver_call_is_named(driver, call):
    driver(fail=call)
    with pytest.raises(UnsupportedError, match=f"CUDA driver {call} failed with CUresult 1"):
        cuda_context.make_context_current(torch.device("cuda", 0))


def test_off_cuda_nothing_is_called(driver):
    fake = driver()
    cuda_context.make_context_current(torch.device("cpu"))
    assert fake.calls == []
