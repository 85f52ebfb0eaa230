"""A/B of `gluon_chain.EARLY_WEIGHTS` (the first ring's weight tiles sent before the PDL wait for the token
quantizer) in the whole linear, timed as decompose.py (graph replays, bench linear's rotation), twice each,
alternating, plus the linear with Q(x) given (no quantizer launch to overlap).
Usage: python3 early_probe.py OUT.json
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F
from torch import nn

from precision_engine.bench.gemm import timed
from precision_engine.bench.linear import _specs
from precision_engine.bench.timing import rotation
from precision_engine.numerics import gluon_chain
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.quantize import quantize_rows_1xG

ACT = PRESET_FORMATS["fp8_group_act"]
SHAPES = ((4096, 4096), (1024, 4096), (6144, 4096), (4096, 14336), (12288, 4096), (4096, 12288))


def main() -> None:
    spec, numerics = _specs()["fp8_bi"]
    rows = []
    for n, k in SHAPES:
        for m in (1, 16, 64):
            torch.manual_seed(n + k + m)

            def make():
                lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                return lin, Fp8Linear.from_linear(lin, spec, numerics=numerics), x, quantize_rows_1xG(x, ACT)

            sets = rotation(make, (n * k + 2 * m * (n + k)) * 2)
            row = {"n": n, "k": k, "m": m}
            with torch.no_grad():
                outs = {}
                for early in (False, True):
                    gluon_chain.EARLY_WEIGHTS = early
                    outs[early] = sets[0][1](sets[0][2])
                row["same_bits"] = bool(torch.equal(outs[False].view(torch.int16), outs[True].view(torch.int16)))
                row["bf16"] = timed(lambda lin, fp8, x, xq: F.linear(x, lin.weight), sets, graphed=True,
                                    warmup=5, reps=30) * 1e3
                for rep in range(2):
                    for early in (False, True):
                        gluon_chain.EARLY_WEIGHTS = early
                        key = "early" if early else "late"
                        row[f"{key}{rep}"] = timed(lambda lin, fp8, x, xq: fp8(x), sets, graphed=True,
                                                   warmup=5, reps=30) * 1e3
                        row[f"{key}_xq{rep}"] = timed(lambda lin, fp8, x, xq: fp8(x, x_quantized=xq), sets,
                                                      graphed=True, warmup=5, reps=30) * 1e3
            rows.append(row)
            b = row["bf16"]
            print(f"{n:>6}x{k:<6} M={m:<3} bits {'same' if row['same_bits'] else 'DIFFER'}  bf16 {b:5.1f}us  "
                  + "  ".join(f"{key} {b / row[key]:.2f}x" for key in
                              ("late0", "early0", "late1", "early1", "late_xq0", "early_xq0", "late_xq1", "early_xq1")),
                  flush=True)
            with open(sys.argv[1], "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
