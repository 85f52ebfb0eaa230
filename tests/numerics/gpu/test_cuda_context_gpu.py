"""Launches whose TMA descriptors the host encodes, as a thread's first CUDA work (`numerics.cuda_context`).

A new thread has no current CUDA context, and allocations that hit torch's cache make no CUDA call that would set
one; the Gluon grad-output quantizer launched there failed with "invalid device context" until the launch made the
context current (autograd's device thread, thirty-ninth session, H100). Each test checks that its thread started
without a context, so it exercises that path, and compares the bytes with the main thread's.
"""

import ctypes
import subprocess
import sys
import threading
from dataclasses import replace

import pytest
import torch

from precision_engine.numerics.formats import PRESET_FORMATS, Axis, Kernel
from precision_engine.numerics.gemm import deep_gemm_available, fp8_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

from helpers import assert_bitwise

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs a Hopper GPU")]
ROWS, TOKENS = PRESET_FORMATS["fp8_group_act"], replace(PRESET_FORMATS["fp8_group_tokens"], axis=Axis.TOKENS)


def _context_is_current() -> bool:
    """Whether this thread has a current CUDA context (the driver asked directly, so that this test runs on a tree
    without `cuda_context` too, where it fails)."""
    current = ctypes.c_void_p()
    assert ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent(ctypes.byref(current)) == 0
    return bool(current.value)


def _on_a_new_thread(work):
    """work()'s result on a new thread, and whether that thread began without a current context."""
    out = {}

    def run():
        out["without_context"] = not _context_is_current()
        try:
            out["result"] = work()
        except Exception as err:  # noqa: BLE001 (raised again on the test's thread, where pytest sees it)
            out["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    torch.cuda.synchronize()
    return out["result"], out["without_context"]


def test_the_gluon_grad_output_quantizer_as_a_threads_first_work():
    from precision_engine.numerics import gluon_grad_output as G

    dy = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    if not G.runs(dy, ROWS, TOKENS):
        pytest.skip("the Gluon grad-output quantizer runs on Hopper under Triton 3.6 only")
    want = G.quantize_rows_and_tokens_transposed(dy, ROWS, TOKENS)
    G.quantize_rows_and_tokens_transposed(dy, ROWS, TOKENS)  # freed: the thread's buffers come from torch's cache
    got, without_context = _on_a_new_thread(lambda: G.quantize_rows_and_tokens_transposed(dy, ROWS, TOKENS))
    assert without_context
    assert_bitwise(got[0], want[0])
    assert_bitwise(got[1], want[1])


@pytest.mark.parametrize("launch", ["training", "decode", "chain"])
def test_each_gluon_gemm_launch_as_a_threads_first_work(launch):
    """Every Gluon GEMM launch makes the context current once, before its descriptors are encoded."""
    from precision_engine.numerics import gluon_chain, gluon_gemm

    m = {"training": 512, "decode": 16, "chain": 16}[launch]
    x = quantize_rows_1xG(torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16), ROWS)
    w = quantize_blocks(torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) * 0.02,
                        PRESET_FORMATS["fp8_block_weight"])
    if not gluon_gemm.runs(x.data, w.data):
        pytest.skip("the Gluon GEMMs run on Hopper under Triton 3.6 only")
    operands = (x.data, x.scale, w.data, w.scale)
    call = {"training": lambda: gluon_gemm.gluon_block_scaled_gemm(*operands, b_scale_rows=128, seg_kb=32),
            "decode": lambda: gluon_gemm.gluon_decode_gemm(*operands, b_scale_rows=128, seg_kb=32),
            "chain": lambda: gluon_chain.gluon_chain_decode_gemm(*operands, b_scale_rows=128)}[launch]
    want = call()
    call()  # freed: the thread's output comes from torch's cache
    got, without_context = _on_a_new_thread(call)
    assert without_context
    assert torch.equal(got, want)


@pytest.mark.skipif(not deep_gemm_available(), reason="needs DeepGEMM")
def test_deep_gemm_as_a_threads_first_work():
    x = quantize_rows_1xG(torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16), ROWS)
    w = quantize_blocks(torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) * 0.02,
                        PRESET_FORMATS["fp8_block_weight"])
    want = fp8_gemm(x, w)
    fp8_gemm(x, w)
    # named, not AUTO: AUTO falls back to cuBLAS's launch of the same bits where DeepGEMM fails, which hid the
    # failure on main (fortieth session, H100: CUDA_ERROR_INVALID_CONTEXT, warned and passed)
    got, without_context = _on_a_new_thread(lambda: fp8_gemm(x, w, kernel=Kernel.DEEP_GEMM, batch_invariant=False))
    assert without_context
    assert torch.equal(got, want)


FIRST_BACKWARD = """
import torch
from dataclasses import replace
from precision_engine.numerics.formats import PRESET_FORMATS, Axis
from precision_engine.numerics.quantize import quantize_rows_and_tokens_transposed
rows, tokens = PRESET_FORMATS["fp8_group_act"], replace(PRESET_FORMATS["fp8_group_tokens"], axis=Axis.TOKENS)
x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
quantize_rows_and_tokens_transposed(dy, rows, tokens)  # freed: the backward's buffers come from torch's cache

class Quantizes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        quantize_rows_and_tokens_transposed(g, rows, tokens)
        return g

Quantizes.apply(x).backward(dy)
torch.cuda.synchronize()
print("backward ran")
"""


def test_a_first_backward_that_starts_with_a_gluon_launch():
    """Autograd's device thread, fresh in a new process, whose first CUDA work is the quantizer's launch."""
    done = subprocess.run([sys.executable, "-c", FIRST_BACKWARD], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "backward ran" in done.stdout, done.stderr[-2000:]
