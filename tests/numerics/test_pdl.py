"""Programmatic dependent launch along the decode chain (`numerics.pdl`): who launches with it, and that every
kernel so launched waits for its producer before it loads anything (a load above the wait would read the
previous kernel's output while it is still being written: wrong bits, only sometimes)."""

import pytest
import torch

from precision_engine.numerics import pdl
from precision_engine.numerics.capabilities import SMALL_M_MAX

from helpers import run_offline_compile


def test_launch_options_only_at_decode_sizes_on_hopper(monkeypatch):
    assert pdl.launch_options(1, torch.device("cpu")) == {}
    monkeypatch.setattr(pdl, "_supported", lambda device: True)
    assert pdl.launch_options(SMALL_M_MAX, torch.device("cuda")) == {"launch_pdl": True}
    assert pdl.launch_options(SMALL_M_MAX + 1, torch.device("cuda")) == {}
    monkeypatch.setattr(pdl, "ENABLED", False)
    assert pdl.launch_options(1, torch.device("cuda")) == {}


_WAIT_FIRST = r'''
import re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from precision_engine.numerics import triton_gemm as TG, triton_quant as TQ

def ptx(fn, types, constexprs):
    sig = dict(zip(fn.arg_names, types + ["constexpr"] * len(constexprs)))
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(types) if t.startswith("*")}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]

def wait_precedes_loads(text, name):
    body = text[text.index(".entry"):]
    wait = body.index("griddepcontrol.wait")
    first = min(m.start() for m in re.finditer(r"\b(ld\.global|cp\.async)", body))
    assert wait < first, (name, body[wait - 200:wait + 50])

gemm = ["*fp8e4nv", "*fp8e4nv", "*bf16", "*fp32", "*i32", "*fp32", "*fp32"] + ["i32"] * 14
common = dict(SCALE_AM=1, SCALE_BN=128, EVEN_K=True, TMA=False, FLATTEN=False, BLOCK_M=128, BLOCK_N=16, BLOCK_K=128)
for split, fused in ((True, True), (True, False), (False, False)):
    wait_precedes_loads(ptx(TG._fp8_block_gemm_kernel, gemm,
                            dict(common, SPLIT=split, FUSED_SUM=fused, GROUP_M=1)), f"block split={split}")
wait_precedes_loads(ptx(TG._fp8_persistent_kernel, gemm[:4] + gemm[5:] + ["i32"],
                        dict(common, SPLIT=False)), "persistent")
wait_precedes_loads(ptx(TG._sum_segments_kernel, ["*fp32", "*bf16", "i32", "i32"], dict(BLOCK=1024)), "sum")
fmt = dict(FMAX=448.0, RFMAX=1 / 448, MBITS=3, EMIN=-6, POW2=False, EXACT_ROUND=False)
rows = ptx(TQ._rows_kernel, ["*bf16", "*fp8e4nv", "*fp32"] + ["i32"] * 6, dict(G=128, BLOCK_G=128, BLOCK_M=16, GROUPS=1, **fmt))
assert "griddepcontrol.launch_dependents" in rows
print("ok")
'''


@pytest.mark.slow
def test_decode_kernels_wait_for_their_producer_before_any_load():
    """Ahead-of-time sm_90 PTX (no GPU; ~15 s): in the decode GEMM's launches (split, fused sum, persistent) and
    the segment sum, griddepcontrol.wait comes before the first global load; the token quantizer releases."""
    run_offline_compile(_WAIT_FIRST)
