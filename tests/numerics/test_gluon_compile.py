"""The Gluon GEMM's schedule survives compilation: ptxas keeps its wgmmas asynchronous (no C7514 "wgmma
serialized" note) and spills nothing, for the shipped config and both scale layouts.

Needs no GPU, only Triton 3.6 (the release the kernel is written for) and its bundled ptxas: the kernel is
compiled for sm_90 offline. A change that reintroduces an accumulator read or copy under an in-flight wgmma,
or a wgmma in flight across a loop's back edge, fails here before it costs a device run. ~6 s.
Not GPU-marked, so it runs wherever Triton 3.6 is installed (`scripts/gpu_final.sh` runs it on the H200).
"""

import os
import re
import subprocess

import pytest
import torch

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(tuple(int(p) for p in triton.__version__.split(".")[:2]) != (3, 6),
                                reason="the Gluon kernel is Triton 3.6's (no GPU needed)")


@pytest.mark.parametrize("scale_rows", [128, 1], ids=["weight-blocks", "token-groups"])
def test_shipped_config_keeps_wgmma_async(tmp_path, scale_rows):
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    from precision_engine.numerics import gluon_gemm as G

    cfg = G.TRAINING
    fp8 = torch.empty(512, 512, dtype=torch.float8_e4m3fn)
    descs = {"a_desc": G._descriptor(fp8, G.TILE_M), "b_desc": G._descriptor(fp8, cfg.block_n)}
    fn = G._gluon_block_gemm_kernel
    constexprs = {"SCALE_BN": scale_rows, "GROUP_M": cfg.group_m, "STAGES": cfg.stages, "UNROLL": cfg.unroll}
    signature = {}
    for name in fn.arg_names:
        if name in descs:
            signature[name] = mangle_type(descs[name])
        elif name in constexprs:
            signature[name] = "constexpr"
        else:
            signature[name] = {"c_ptr": "*bf16", "sa_ptr": "*fp32", "sb_ptr": "*fp32"}.get(name, "i32")
    source = GluonASTSource(fn, signature, {(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = tmp_path / "kernel.ptx"
    ptx.write_text(kernel.asm["ptx"])
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    report = subprocess.run([ptxas, "-v", "-arch=sm_90a", str(ptx), "-o", os.devnull], capture_output=True,
                            text=True, check=True).stderr
    assert "C7514" not in report, report
    if scale_rows == 128:  # 1x128 groups on both operands (wgrad) hold a scale per column: some spills there
        assert "0 bytes spill stores" in report, report


@pytest.mark.parametrize("whole", [False, True], ids=["segments", "whole-tiles"])
def test_decode_config_keeps_wgmma_async(tmp_path, whole):
    """The decode launch (`gluon_gemm.DECODE`) as it ships, over K segments and over whole tiles: no
    serialised wgmma, and no spill over segments (unroll 4 over 128-row units spilled 450-700 bytes). Whole
    tiles spill 8 bytes as shipped (their running total's shared-memory round trip), which the H200 timed
    faster than the Triton launch (38.1 against 39.9 us, fused gate/up at M = 64): more fails here."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    from precision_engine.numerics import gluon_gemm as G

    cfg = G.DECODE
    fp8 = torch.empty(512, 512, dtype=torch.float8_e4m3fn)
    descs = {"a_desc": G._descriptor(fp8, 64), "b_desc": G._descriptor(fp8, cfg.block_n)}
    fn = G._gluon_decode_gemm_kernel
    constexprs = {"SCALE_BN": 128, "STAGES": cfg.stages, "UNROLL": cfg.unroll, "WHOLE": whole}
    signature = {}
    for name in fn.arg_names:
        if name in descs:
            signature[name] = mangle_type(descs[name])
        elif name in constexprs:
            signature[name] = "constexpr"
        else:
            out = "*bf16" if whole else "*fp32"
            signature[name] = {"out_ptr": out, "sa_ptr": "*fp32", "sb_ptr": "*fp32"}.get(name, "i32")
    source = GluonASTSource(fn, signature, {(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = tmp_path / "kernel.ptx"
    ptx.write_text(kernel.asm["ptx"])
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    report = subprocess.run([ptxas, "-v", "-arch=sm_90a", str(ptx), "-o", os.devnull], capture_output=True,
                            text=True, check=True).stderr
    spilled = int(re.search(r"(\d+) bytes spill stores", report).group(1))
    assert "C7514" not in report and spilled <= (8 if whole else 0), report
