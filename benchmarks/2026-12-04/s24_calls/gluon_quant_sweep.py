"""Probe (prepared in the twenty-fourth session; needs `s23_calls/gluon_requant.patch` and, for its second part,
`s24_calls/gluon_grad_output.patch`): the TMA-fed quantizers' ring depth and programs an SM (each module's
STAGES and PER_SM, constants its launch reads) against the Triton kernels AUTO ran before them, in % of a device
copy measured in the same run, as bench.quant times them (inputs rotated past the L2, median of 30). The bytes of
every config against the Triton kernel's first, on a ragged shape with signed zeros and a NaN.
Usage: python3 gluon_quant_sweep.py OUT.json. About 2-3 minutes.
"""

from __future__ import annotations

import importlib
import json
import sys

import torch

from precision_engine.bench.quant import ACT_SHAPES, copy_bandwidth, grad_output_bytes, requantize_bytes
from precision_engine.bench.timing import gbps, median, rotation, time_cuda
from precision_engine.numerics import quantize as Q
from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.formats import PRESET_FORMATS

ACT, TOK = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]
# (STAGES, PER_SM): two programs an SM take 128 registers a thread each and half the shared memory
REQUANT = ("gluon_requant", ((3, 2), (2, 2), (4, 2), (5, 2), (6, 1)))  # (STAGES + 2) x 16 KiB a program
GRAD_OUTPUT = ("gluon_grad_output", ((2, 2), (3, 1), (4, 1)))  # STAGES x 32 KiB + 32 KiB a program


def with_config(module, stages: int, per_sm: int, fn, *args):
    saved = module.STAGES, module.PER_SM
    module.STAGES, module.PER_SM = stages, per_sm
    try:
        return fn(*args)
    finally:
        module.STAGES, module.PER_SM = saved


def same_bytes(got, want) -> bool:
    pairs = zip(got, want) if isinstance(want, tuple) else [(got, want)]
    return all(a.data.shape == b.data.shape and torch.equal(a.data.view(torch.uint8), b.data.view(torch.uint8))
               and torch.equal(a.scale.view(torch.int32), b.scale.view(torch.int32)) for a, b in pairs)


def part(name: str, configs, gluon_call, triton_call, make, nbytes_of, probe_input, copy: float) -> dict:
    """Bytes of each config against the Triton kernel's on `probe_input`, then % of copy on the 8B shapes."""
    try:
        module = importlib.import_module(f"precision_engine.numerics.{name}")
    except ImportError:
        print(f"{name}: not in this tree (its patch is not applied)", flush=True)
        return {}
    want = triton_call(probe_input)
    bits = {}
    for s, p in configs:
        try:
            bits[f"s{s}_p{p}"] = same_bytes(with_config(module, s, p, gluon_call, module, probe_input), want)
        except Exception as err:  # noqa: BLE001 (a ring that does not fit: say so, time the others)
            bits[f"s{s}_p{p}"] = f"{type(err).__name__}: {str(err)[:160]}"
    print(f"{name}: bytes equal to the Triton kernel's: {bits}", flush=True)
    variants = [("triton", triton_call)]
    variants += [(f"s{s}_p{p}", lambda x, s=s, p=p: with_config(module, s, p, gluon_call, module, x))
                 for s, p in configs if bits[f"s{s}_p{p}"] is True]
    rows = []
    for m, k in ACT_SHAPES:
        nbytes = nbytes_of(m, k)
        sets = rotation(lambda: (make(m, k),), nbytes)
        line = []
        for tag, fn in variants:
            ms = median(time_cuda(fn, warmup=5, reps=30, inputs_rotation=sets))
            pct = 100 * gbps(nbytes, ms) / copy
            rows.append({"kernel": name, "variant": tag, "m": m, "k": k, "ms": ms, "pct_copy": pct})
            line.append(f"{tag} {pct:.1f}%")
        print(f"  {name} {m}x{k}: " + ", ".join(line), flush=True)
        del sets
        torch.cuda.empty_cache()
    return {"bits": bits, "rows": rows}


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(8192 + 7, 4096, device="cuda", generator=gen) * torch.exp(
        torch.randn(8192 + 7, 1, device="cuda", generator=gen) * 3)
    x[::9, ::5] *= 1e-30  # FP8 underflow: signed zeros
    x[-1, 7] = float("nan")
    x = x.to(torch.bfloat16)
    copy = copy_bandwidth()
    print(f"copy {copy:,.0f} GB/s", flush=True)
    bf16 = lambda m, k: torch.randn((m, k), device="cuda", dtype=torch.bfloat16)  # noqa: E731
    results = {"copy_gbps": copy}
    results[REQUANT[0]] = part(
        *REQUANT, lambda module, q: module.requantize_tokens_transposed(q, TOK),
        lambda q: T.requantize_tokens_transposed(q, TOK), lambda m, k: Q.quantize_rows_1xG(bf16(m, k), ACT),
        requantize_bytes, Q.quantize_rows_1xG(x, ACT), copy)
    results[GRAD_OUTPUT[0]] = part(
        *GRAD_OUTPUT, lambda module, dy: module.quantize_rows_and_tokens_transposed(dy, ACT, TOK),
        lambda dy: T.quantize_rows_and_tokens_transposed(dy, ACT, TOK), bf16, grad_output_bytes, x, copy)
    with open(sys.argv[1], "w") as f:
        json.dump(results, f, indent=1)
    ok = all(v is True for r in results.values() if isinstance(r, dict) for v in r.get("bits", {}).values())
    print("done", "bytes OK" if ok else "NOT ALL BYTES EQUAL", flush=True)


if __name__ == "__main__":
    main()
