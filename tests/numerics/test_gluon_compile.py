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


def _ptxas_report(tmp_path, fn, rows_a: int, block_n: int, constexprs: dict, pointers: dict, c_cols=None,
                  fp8_descs: dict | None = None, options: dict | None = None) -> str:
    """ptxas -v's report on Gluon kernel `fn` compiled for sm_90: FP8 descriptors of rows_a / block_n rows (or
    `fp8_descs`, rows by argument name) and a BF16 one for its output where it takes one, `pointers` the types
    of its pointer arguments, every other argument an i32; `options` beside num_warps = 4 (e.g. maxnreg)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    from precision_engine.numerics import gluon_gemm as G

    fp8 = torch.empty(512, 512, dtype=torch.float8_e4m3fn)
    descs = {"a_desc": G._descriptor(fp8, rows_a), "b_desc": G._descriptor(fp8, block_n),
             "c_desc": G._descriptor(torch.empty(512, 512, dtype=torch.bfloat16), 64, c_cols or block_n)}
    descs.update({name: G._descriptor(fp8, rows) for name, rows in (fp8_descs or {}).items()})
    signature = {}
    for name in fn.arg_names:
        if name in descs:
            signature[name] = mangle_type(descs[name])
        elif name in constexprs:
            signature[name] = "constexpr"
        else:
            signature[name] = pointers.get(name, "i32")
    source = GluonASTSource(fn, signature, {(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, **(options or {})})
    ptx = tmp_path / "kernel.ptx"
    ptx.write_text(kernel.asm["ptx"])
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    return subprocess.run([ptxas, "-v", "-arch=sm_90a", str(ptx), "-o", os.devnull], capture_output=True,
                          text=True, check=True).stderr


@pytest.mark.parametrize("scale_rows", [128, 1], ids=["weight-blocks", "token-groups"])
def test_shipped_config_keeps_wgmma_async(tmp_path, scale_rows):
    from precision_engine.numerics import gluon_gemm as G

    cfg = G.TRAINING
    report = _ptxas_report(
        tmp_path, G._gluon_block_gemm_kernel, G.TILE_M, cfg.block_n,
        {"SCALE_BN": scale_rows, "GROUP_M": cfg.group_m, "STAGES": G._ring_slots(cfg, 2), "TMA_STORE": True,
         "SPLIT_N": False},
        {"c_ptr": "*bf16", "sa_ptr": "*fp32", "sb_ptr": "*fp32"})
    assert "C7514" not in report, report
    if scale_rows == 128:  # 1x128 groups on both operands (wgrad) hold a scale per column: some spills there
        assert "0 bytes spill stores" in report, report


def test_split_config_keeps_wgmma_async(tmp_path):
    """The column-split schedule (`TRAINING_SPLIT`): no serialised wgmma. ptxas keeps 17 registers of the
    running total in local memory across each segment's loop (276 bytes of spill stores, touched once per
    segment, never inside its K loop); the H200 timed the split faster than the unsplit kernel on the shapes
    `training_config` gives it all the same (benchmarks 2026-12-02). More spill than that fails here."""
    from precision_engine.numerics import gluon_gemm as G

    cfg = G.TRAINING_SPLIT
    report = _ptxas_report(
        tmp_path, G._gluon_block_gemm_kernel, G.TILE_M, cfg.block_n,
        {"SCALE_BN": 128, "GROUP_M": cfg.group_m, "STAGES": G._ring_slots(cfg, 2), "TMA_STORE": True,
         "SPLIT_N": True},
        {"c_ptr": "*bf16", "sa_ptr": "*fp32", "sb_ptr": "*fp32"}, c_cols=cfg.block_n // 2)
    spilled = int(re.search(r"(\d+) bytes spill stores", report).group(1))
    assert "C7514" not in report and spilled <= 276, report


@pytest.mark.parametrize("whole", [False, True], ids=["segments", "whole-tiles"])
def test_decode_config_keeps_wgmma_async(tmp_path, whole):
    """The decode launch (`gluon_gemm.DECODE`) as it ships, over K segments and over whole tiles: no
    serialised wgmma, and no spill over segments (unroll 4 over 128-row units spilled 450-700 bytes). Whole
    tiles spill 8 bytes as shipped (their running total's shared-memory round trip), which the H200 timed
    faster than the Triton launch (38.1 against 39.9 us, fused gate/up at M = 64): more fails here."""
    from precision_engine.numerics import gluon_gemm as G

    cfg = G.DECODE
    report = _ptxas_report(
        tmp_path, G._gluon_decode_gemm_kernel, 64, cfg.block_n,
        {"SCALE_BN": 128, "STAGES": cfg.stages, "UNROLL": cfg.unroll, "WHOLE": whole},
        {"out_ptr": "*bf16" if whole else "*fp32", "sa_ptr": "*fp32", "sb_ptr": "*fp32"})
    spilled = int(re.search(r"(\d+) bytes spill stores", report).group(1))
    assert "C7514" not in report and spilled <= (8 if whole else 0), report


@pytest.mark.parametrize("m, n, weight_rows", [(1, 4096, 0), (16, 4096, 0), (64, 4096, 0), (64, 6144, 0),
                                                (1, 12288, 0), (16, 12288, 0), (32, 12288, 0), (64, 12288, 0),
                                                (64, 6144, 64), (64, 12288, 32)])
def test_chain_decode_keeps_wgmma_async(tmp_path, m, n, weight_rows):
    """The one-chain decode (`gluon_chain`) as `chain_config` launches it for M tokens against a narrow weight
    (token tiles of 8, 16, 32 and 64; two programs an SM at 128 registers for the 12288-row weight; 32-row weight
    tiles on wgmma's narrow side at 64 tokens on 4096 rows, 64-row ones two an SM on 12288), and others: no
    serialised wgmma; no spill for token tiles of up to 32, 40 bytes at 64 (2 wgmmas in flight over trips of 4
    blocks; trips of 8 spilled 1.9 KB there, and a K loop unrolled whole spilled at every width), none with the
    weight on the narrow side."""
    from precision_engine.numerics import gluon_chain as C

    cfg = C.chain_config(m, n, 14336, 132)
    if weight_rows:
        cfg = C.ChainConfig(stages=12, trip=4, ahead=3, weight_rows=weight_rows)
    block_w, block_t = C.tiles(cfg, m)
    cap = C.SM_REGISTERS // (cfg.per_sm * C.PROGRAM_THREADS)
    report = _ptxas_report(
        tmp_path, C._gluon_chain_decode_kernel, 64, block_t,
        {"SCALE_BN": 128, "STAGES": cfg.stages, "TRIP": cfg.trip, "AHEAD": cfg.ahead, "KB_PAD": 128,
         "WEIGHT_ON_M": not cfg.weight_rows},
        {"c_ptr": "*bf16", "sx_ptr": "*fp32", "sw_ptr": "*fp32"},
        fp8_descs={"w_desc": block_w, "x_desc": block_t}, options={"maxnreg": cap} if cfg.per_sm > 1 else None)
    if not weight_rows:  # chain_config's own: two an SM where its programs outnumber the SMs
        assert cfg.per_sm == (2 if n == 12288 else 1)
    spilled = int(re.search(r"(\d+) bytes spill stores", report).group(1))
    assert "C7514" not in report and spilled <= (40 if block_t == 64 and not cfg.weight_rows else 0), report
