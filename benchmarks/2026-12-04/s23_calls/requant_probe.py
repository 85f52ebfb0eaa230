"""The persistent re-quantizer (`triton_quant._requant_kernel`, this session) against the one-item kernel it
replaces (HEAD ccd5f66's triton_quant.py, `triton_quant_before.py`, loaded as a module of its own) on the H200.

(a) Bits: on a ragged shape (M = 8199, and 1000 x 3000: ragged columns too) with FP8 underflow to -0 and a NaN
group, fp32 and power-of-two scales: the new kernel's data and scale bytes equal HEAD's and the reference's.
(b) Time: HEAD, the new default and the bench.quant REQUANT_SWEEP neighbours at 8192..16384 x 4096..14336, as
bench.quant times them (inputs rotated past the L2, median of 30), in % of a device copy measured here.
Run from the repository root: python3 benchmarks/2026-12-04/s23_calls/requant_probe.py [out.json]. ~1-2 min.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from precision_engine.bench.quant import ACT_SHAPES, REQUANT_SWEEP, copy_bandwidth, requantize_bytes
from precision_engine.bench.timing import gbps, median, rotation, time_cuda
from precision_engine.numerics import quantize as Q
from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.formats import PRESET_FORMATS, ScaleKind

ACT, TOK = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]


def head_module():
    """The one-item kernel's triton_quant.py (HEAD ccd5f66's, copied beside this probe: the device's copy of the
    tree has no git history) as a module of its own (Triton compiles @jit functions from source files only)."""
    path = Path(__file__).with_name("triton_quant_before.py")
    spec = importlib.util.spec_from_file_location("triton_quant_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def same_bytes(a: Q.Quantized, b: Q.Quantized) -> bool:
    return a.data.shape == b.data.shape and bool((a.data.view(torch.uint8) == b.data.view(torch.uint8)).all()) \
        and a.scale.shape == b.scale.shape and bool((a.scale.view(torch.int32) == b.scale.view(torch.int32)).all())


def check_bits(old) -> bool:
    ok = True
    for shape in [(8192 + 7, 4096), (1000, 3000)]:
        for pow2 in (False, True):
            act, tok = (replace(ACT, scale=ScaleKind.POW2), replace(TOK, scale=ScaleKind.POW2)) if pow2 else (ACT, TOK)
            gen = torch.Generator(device="cuda").manual_seed(shape[0])
            x = torch.randn(shape, device="cuda", generator=gen) * torch.exp(
                torch.randn(shape[0], 1, device="cuda", generator=gen) * 3)
            x[::9, ::5] *= 1e-30  # FP8 underflow: signed zeros by the thousand
            x[-1, 7] = float("nan")
            saved = Q.quantize_rows_1xG(x.to(torch.bfloat16), act)
            new = T.requantize_tokens_transposed(saved, tok)
            head = old.requantize_tokens_transposed(saved, tok)
            cpu = replace(saved, data=saved.data.cpu(), scale=saved.scale.cpu())
            ref = Q.requantize_tokens_transposed(cpu, backend="reference")
            new_cpu = replace(new, data=new.data.cpu(), scale=new.scale.cpu())
            configs = [dict(zip(("BLOCK_C", "PER_SM", "num_warps", "maxnreg"), c), VEC=4) for c in REQUANT_SWEEP]
            swept = all(same_bytes(T.requantize_tokens_transposed(saved, tok, config=c), head) for c in configs)
            row = (same_bytes(new, head), same_bytes(new_cpu, ref), swept)
            ok &= all(row)
            print(f"bits {shape[0]}x{shape[1]} {'pow2' if pow2 else 'fp32'}: new==HEAD {row[0]}, new==reference "
                  f"{row[1]}, every swept config==HEAD {row[2]}", flush=True)
    return ok


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else None
    old = head_module()
    results = {"bits_ok": check_bits(old)}
    copy = copy_bandwidth()
    results["copy_gbps"] = copy
    print(f"copy {copy:,.0f} GB/s", flush=True)
    variants = [("HEAD one-item c32 w2", lambda q: old.requantize_tokens_transposed(q, TOK)),
                ("new default", lambda q: T.requantize_tokens_transposed(q, TOK))]
    for bc, per_sm, warps, regs in REQUANT_SWEEP[1:]:
        config = {"BLOCK_C": bc, "VEC": 4, "PER_SM": per_sm, "num_warps": warps, "maxnreg": regs}
        variants.append((f"new c{bc} p{per_sm} w{warps} r{regs}",
                         lambda q, c=config: T.requantize_tokens_transposed(q, TOK, config=c)))
    rows = []
    table = {name: [] for name, _ in variants}
    for m, k in ACT_SHAPES:
        nbytes = requantize_bytes(m, k)
        sets = rotation(lambda: (Q.quantize_rows_1xG(torch.randn((m, k), device="cuda", dtype=torch.bfloat16),
                                                     ACT),), nbytes)
        for name, fn in variants:
            ms = median(time_cuda(fn, warmup=5, reps=30, inputs_rotation=sets))
            pct = 100 * gbps(nbytes, ms) / copy
            table[name].append(pct)
            print(f"  {m}x{k} {name}: {ms * 1e3:.1f} us, {pct:.1f}% of copy", flush=True)
            rows.append({"variant": name, "m": m, "k": k, "ms": ms, "pct_copy": pct})
        del sets
        torch.cuda.empty_cache()
    print(f"{'% of copy':<26}" + "".join(f"{f'{m}x{k}':>12}" for m, k in ACT_SHAPES))
    for name, pcts in table.items():
        print(f"{name:<26}" + "".join(f"{p:>12.1f}" for p in pcts), flush=True)
    results["rows"] = rows
    if out:
        Path(out).write_text(json.dumps(results, indent=1))
    print("done", "bits OK" if results["bits_ok"] else "BITS DIFFER")


if __name__ == "__main__":
    main()
