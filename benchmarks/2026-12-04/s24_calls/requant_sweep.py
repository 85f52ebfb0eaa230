"""Probe (prepared in the twenty-fourth session; needs `s23_calls/gluon_requant.patch`): the Gluon re-quantizer's
ring depth and programs an SM (`gluon_requant.STAGES`, `PER_SM`, module constants its launch reads) against the
Triton kernel AUTO ran before it, in % of a device copy measured in the same run, as bench.quant times them
(inputs rotated past the L2, median of 30). Bytes of every config against the Triton kernel's first, on a ragged
shape with signed zeros and a NaN group.
Usage: python3 requant_sweep.py OUT.json. About 1-2 minutes.
"""

from __future__ import annotations

import json
import sys

import torch

from precision_engine.bench.quant import ACT_SHAPES, copy_bandwidth, requantize_bytes
from precision_engine.bench.timing import gbps, median, rotation, time_cuda
from precision_engine.numerics import gluon_requant as R
from precision_engine.numerics import quantize as Q
from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.formats import PRESET_FORMATS

ACT, TOK = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]
# (STAGES, PER_SM): shared memory (STAGES + 2) x 16 KiB a program; two an SM take 128 registers a thread each
CONFIGS = ((3, 2), (2, 2), (4, 2), (5, 2), (6, 1))


def with_config(stages: int, per_sm: int, fn, *args):
    saved = R.STAGES, R.PER_SM
    R.STAGES, R.PER_SM = stages, per_sm
    try:
        return fn(*args)
    finally:
        R.STAGES, R.PER_SM = saved


def same_bytes(a: Q.Quantized, b: Q.Quantized) -> bool:
    return a.data.shape == b.data.shape and torch.equal(a.data.view(torch.uint8), b.data.view(torch.uint8)) \
        and torch.equal(a.scale.view(torch.int32), b.scale.view(torch.int32))


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(8192 + 7, 4096, device="cuda", generator=gen) * torch.exp(
        torch.randn(8192 + 7, 1, device="cuda", generator=gen) * 3)
    x[::9, ::5] *= 1e-30  # FP8 underflow: signed zeros
    x[-1, 7] = float("nan")
    saved = Q.quantize_rows_1xG(x.to(torch.bfloat16), ACT)
    want = T.requantize_tokens_transposed(saved, TOK)
    bits = {}
    for s, p in CONFIGS:
        try:
            bits[f"s{s}_p{p}"] = same_bytes(with_config(s, p, R.requantize_tokens_transposed, saved, TOK), want)
        except Exception as err:  # noqa: BLE001 (a ring that does not fit: say so, time the others)
            bits[f"s{s}_p{p}"] = f"{type(err).__name__}: {str(err)[:160]}"
    print("bytes equal to the Triton kernel's:", bits, flush=True)
    copy = copy_bandwidth()
    print(f"copy {copy:,.0f} GB/s", flush=True)
    variants = [("triton", lambda q: T.requantize_tokens_transposed(q, TOK))]
    variants += [(f"s{s}_p{p}", lambda q, s=s, p=p: with_config(s, p, R.requantize_tokens_transposed, q, TOK))
                 for s, p in CONFIGS if bits[f"s{s}_p{p}"] is True]
    rows = []
    for m, k in ACT_SHAPES:
        nbytes = requantize_bytes(m, k)
        sets = rotation(lambda: (Q.quantize_rows_1xG(torch.randn((m, k), device="cuda", dtype=torch.bfloat16),
                                                     ACT),), nbytes)
        line = []
        for name, fn in variants:
            ms = median(time_cuda(fn, warmup=5, reps=30, inputs_rotation=sets))
            pct = 100 * gbps(nbytes, ms) / copy
            rows.append({"variant": name, "m": m, "k": k, "ms": ms, "pct_copy": pct})
            line.append(f"{name} {pct:.1f}%")
        print(f"  {m}x{k}: " + ", ".join(line), flush=True)
        del sets
        torch.cuda.empty_cache()
    with open(sys.argv[1], "w") as f:
        json.dump({"copy_gbps": copy, "bits": bits, "rows": rows}, f, indent=1)
    print("done", "bytes OK" if all(v is True for v in bits.values()) else "NOT ALL BYTES EQUAL", flush=True)


if __name__ == "__main__":
    main()
