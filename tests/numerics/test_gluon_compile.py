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
                  fp8_descs: dict | None = None, options: dict | None = None,
                  fp8_dtype: torch.dtype = torch.float8_e4m3fn, raw_descs: dict | None = None) -> str:
    """ptxas -v's report on Gluon kernel `fn` compiled for sm_90: FP8 descriptors of rows_a / block_n rows (or
    `fp8_descs`, rows by argument name) and a BF16 one for its output where it takes one, `pointers` the types
    of its pointer arguments, every other argument an i32; `options` beside num_warps = 4 (e.g. maxnreg); the FP8
    descriptors in `fp8_dtype`; BF16 descriptors of `raw_descs` rows by argument name."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    from precision_engine.numerics import gluon_gemm as G

    fp8 = torch.empty(512, 512, dtype=fp8_dtype)
    descs = {"a_desc": G._descriptor(fp8, rows_a), "b_desc": G._descriptor(fp8, block_n),
             "c_desc": G._descriptor(torch.empty(512, 512, dtype=torch.bfloat16), 64, c_cols or block_n)}
    descs.update({name: G._descriptor(fp8, rows) for name, rows in (fp8_descs or {}).items()})
    bf16 = torch.empty(512, 512, dtype=torch.bfloat16)
    descs.update({name: G._descriptor(bf16, rows) for name, rows in (raw_descs or {}).items()})
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


_TOKENS_64 = {"stages": 10, "trip": 4, "ahead": 2, "token_block": 64}  # chain_config's 64-token program
_NARROW = {"stages": 12, "trip": 4, "ahead": 3}


@pytest.mark.parametrize("m, n, given", [(1, 4096, None), (16, 4096, None), (64, 4096, None), (64, 6144, None),
                                         (1, 12288, None), (16, 12288, None), (32, 12288, None), (64, 12288, None),
                                         (20, 4096, None), (48, 6144, None), (56, 4096, None), (48, 1024, None),
                                         (1, 1024, None),
                                         (64, 6144, _TOKENS_64), (48, 6144, _TOKENS_64),
                                         (64, 6144, _NARROW | {"weight_rows": 64}),
                                         (64, 12288, _NARROW | {"weight_rows": 32}),
                                         (8, 1024, _NARROW | {"weight_rows": 8})])
def test_chain_decode_keeps_wgmma_async(tmp_path, m, n, given):
    """The one-chain decode (`gluon_chain`) as `chain_config` launches it for M tokens against a narrow weight
    (token tiles of 8, 16, 32, the tokens landed in 8-row boxes past a power of two at M = 20, 48, 56; two
    programs an SM at 128 registers for the 12288-row weight; above 32 tokens the weight on wgmma's narrow side,
    32 rows a program on 4096 rows, 48 in a 64-row slot on 6144, 8 on 1024, and 64-row tiles two an SM on 12288),
    and launches it gives elsewhere or that are tried by hand (`given`: the 64-token program, which chain_config
    takes where neither narrow tiles nor two programs an SM fit; 64-, 32- and 8-row weight tiles): no serialised
    wgmma; no spill for token tiles of up to 32, 40 bytes for the 64-token program (2 wgmmas in flight over
    trips of 4 blocks; trips of 8 spilled 1.9 KB there, and a K loop unrolled whole spilled at every width),
    none with the weight on the narrow side."""
    from precision_engine.numerics import gluon_chain as C

    cfg = C.ChainConfig(**given) if given else C.chain_config(m, n, 14336, 132)
    slot_w, slot_t = C.slots(cfg, m)
    (w_head, w_copies), (x_head, x_copies) = C.pieces(C.tiles(cfg, m)[0]), C.pieces(C.live_token_rows(cfg, m))
    cap = C.SM_REGISTERS // (cfg.per_sm * C.PROGRAM_THREADS)
    report = _ptxas_report(
        tmp_path, C._gluon_chain_decode_kernel, 64, slot_t,
        {"SCALE_BN": 128, "STAGES": cfg.stages, "TRIP": cfg.trip, "AHEAD": cfg.ahead, "KB_PAD": 128,
         "WEIGHT_ON_M": not cfg.weight_rows, "BLOCK_W": slot_w, "BLOCK_T": slot_t, "W_COPIES": w_copies,
         "X_COPIES": x_copies},
        {"c_ptr": "*bf16", "sx_ptr": "*fp32", "sw_ptr": "*fp32"},
        fp8_descs={"w_desc": w_head, "x_desc": x_head, "w_grain": C.GRAIN.value, "x_grain": C.GRAIN.value},
        options={"maxnreg": cap} if cfg.per_sm > 1 else None)
    if not given:  # chain_config's own: two an SM where its programs outnumber the SMs
        assert cfg.per_sm == (2 if n == 12288 else 1)
    spilled = int(re.search(r"(\d+) bytes spill stores", report).group(1))
    assert "C7514" not in report and spilled <= (40 if slot_t == 64 and not cfg.weight_rows else 0), report


_GRAD_OUTPUT_SM90 = r"""
import re, sys, tempfile
from dataclasses import replace
from pathlib import Path
sys.path.insert(0, "tests/numerics")
from test_gluon_compile import _ptxas_report
from precision_engine.numerics.contract import FP8_TORCH_DTYPE
from precision_engine.numerics import gluon_grad_output as D
from precision_engine.numerics.formats import PRESET_FORMATS, DType, ScaleKind
from precision_engine.numerics.triton_quant import _fmt_args

for dtype in (DType.FLOAT8_E4M3, DType.FLOAT8_E5M2):
    for scale in ScaleKind:
        args = _fmt_args(replace(PRESET_FORMATS["fp8_group_act"], dtype=dtype, scale=scale), False)
        constexprs = {"STAGES": D.STAGES, "COL_TILES": 48}
        for side in ("R", "T"):
            constexprs |= {f"{name}_{side}": args[name] for name in ("FMAX", "RFMAX", "MBITS", "EMIN", "POW2")}
        report = _ptxas_report(
            Path(tempfile.mkdtemp()), D._gluon_grad_output_kernel, 128, 128, constexprs,
            {"sr_ptr": "*fp32", "st_ptr": "*fp32"}, fp8_descs={"qr_desc": 128, "qt_desc": 128},
            raw_descs={"x_desc": 128}, options={"num_warps": D.WARPS, "enable_fp_fusion": False},
            fp8_dtype=FP8_TORCH_DTYPE[dtype])
        registers = int(re.search(r"Used (\d+) registers", report).group(1))
        assert "0 bytes spill stores" in report, report
        assert registers * D.WARPS * 32 * D.PER_SM <= 65536, (dtype, scale, registers)
print("ok")
"""


def test_gluon_grad_output_quantizer_fits_two_programs_an_sm():
    """The TMA-fed grad-output quantizer (`gluon_grad_output`), E4M3 and E5M2 with either scale kind, compiles
    without a spill within the registers that let PER_SM programs share an SM (128; ptxas under Triton 3.6 uses
    107 for E4M3 with fp32 scales). In a fresh interpreter: the kernel
    calls `triton_quant`'s @triton.jit helpers, which the test session's TRITON_INTERPRET would turn into
    interpreted functions."""
    from helpers import run_offline_compile

    run_offline_compile(_GRAD_OUTPUT_SM90)


_REQUANT_SM90 = r"""
import sys, tempfile
from dataclasses import replace
from pathlib import Path
sys.path.insert(0, "tests/numerics")
sys.path.insert(0, "scripts")
from test_gluon_compile import _ptxas_report
from sass_per_element import gluon_requant, gluon_requant_constexprs
from precision_engine.bench.quant import GLUON_REQUANT_SWEEP
from precision_engine.numerics import gluon_requant as R
from precision_engine.numerics.formats import PRESET_FORMATS, DType, ScaleKind
from precision_engine.numerics.triton_quant import _fmt_args

for pow2, most in ((False, 10.5), (True, 8.5)):
    for warps, lanes in GLUON_REQUANT_SWEEP:
        registers, _, per_element = gluon_requant(pow2, warps, lanes)
        assert registers <= 96 and per_element <= most, (pow2, warps, lanes, registers, per_element)
    for lanes in (8, 4):  # into 128x128 blocks: 8 warps a block
        registers, _, per_element = gluon_requant(pow2, 8, lanes, block_scale=True)
        assert registers <= 96 and per_element <= most, (pow2, "blocks", lanes, registers, per_element)
types = {DType.FLOAT8_E4M3: "*fp8e4nv", DType.FLOAT8_E5M2: "*fp8e5"}
for x_type, q_type in ((DType.FLOAT8_E4M3, DType.FLOAT8_E4M3), (DType.FLOAT8_E5M2, DType.FLOAT8_E4M3),
                       (DType.FLOAT8_E4M3, DType.FLOAT8_E5M2)):
    for scale in ScaleKind:
        args = _fmt_args(replace(PRESET_FORMATS["fp8_group_tokens"], dtype=q_type, scale=scale), False)
        for warps, lanes, even, stride, blocks in (
                (R.WARPS, R.TOKEN_LANES, False, 4096, False), (4, 8, True, 14336, False), (2, 4, False, 1001, False),
                (8, 4, True, 4096, False), (R.WARPS, R.TOKEN_LANES, False, 1001, False),
                (R.WARPS, R.TOKEN_LANES, True, 4096, True), (R.WARPS, 4, False, 1001, True)):
            report = _ptxas_report(
                Path(tempfile.mkdtemp()), R._requant_kernel, 128, 128,
                gluon_requant_constexprs(args, warps, lanes, even, stride, blocks),
                {"x_ptr": types[x_type], "s_in_ptr": "*fp32", "q_ptr": types[q_type], "s_ptr": "*fp32"},
                options={"num_warps": warps, "enable_fp_fusion": False})
            assert "0 bytes spill stores" in report, report
for pow2 in (False, True):  # the ring: its programs an SM fit, as launched (16-byte runs; M may be ragged)
    rings = [(R.WARPS, R.TOKEN_LANES, blocks, even, unaligned) for blocks in (False, True)
             for even, unaligned in ((True, ()), (False, ()), (False, ("M", "stride_sig")))]
    rings += [(warps, lanes, False, True, ()) for warps, lanes in GLUON_REQUANT_SWEEP] + [(8, 4, True, True, ())]
    for warps, lanes, blocks, even, unaligned in rings:
        registers, _, _ = gluon_requant(pow2, warps, lanes, blocks, ring=True, even=even, unaligned=unaligned)
        assert registers * 32 * R.RING_WARPS_PER_SM <= 65536, (pow2, warps, lanes, blocks, even, registers)
print("ok")
"""


def test_gluon_requantizer_compiles_lean():
    """The Gluon re-quantizer (`gluon_requant`) keeps what it was written for: with fp32 scales at most 10.5 SASS
    instructions an element (ptxas: 9.7-10.1, against the Triton kernel's 13.1; 8.5 with power-of-two scales,
    7.6-7.9) in at most 96 registers, in every shape of program, into 128x1 groups or 128x128 blocks (9.9-10.3 and
    7.8-8.1); and every variant AUTO can launch (E4M3 and E5M2 either way, both scale kinds, ragged edges, a row
    stride not a multiple of 4, both layouts) compiles without a spill; the ring program, in every shape the
    benchmark sweeps, fits the programs an SM it is launched with (at most 128 registers; 108-127). A
    change that brings back a transpose through shared memory (about 1.1 an element), or per-thread scales,
    fails here before a device run. In a fresh interpreter, as the grad-output quantizer's test."""
    from helpers import run_offline_compile

    run_offline_compile(_REQUANT_SM90)
