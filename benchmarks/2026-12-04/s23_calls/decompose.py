"""Where a whole FP8 linear's decode time goes (twenty-third session): in one harness (bench linear's decode
timing: CUDA-graph replays of one call per rotated input set), per (N, K, M):
  bf16      F.linear(x, W)
  whole     Fp8Linear (fp8_bi) forward: Q(x), then the GEMM, PDL between them (as `bench linear`)
  whole_nopdl  the same with PDL off
  xq_given  Fp8Linear forward with x_quantized given (the decoder's producers quantize: no Q(x) launch)
  q         Q(x) alone (quantize_rows_1xG)
  floor     a one-element add: one launch's floor in a graph
Usage: python3 decompose.py OUT.json
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
from precision_engine.numerics import pdl
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.quantize import quantize_rows_1xG

ACT = PRESET_FORMATS["fp8_group_act"]
SHAPES = ((4096, 4096), (1024, 4096), (6144, 4096), (4096, 14336), (12288, 4096), (4096, 12288), (14336, 4096))


def main() -> None:
    spec, numerics = _specs()["fp8_bi"]
    rows = []
    for n, k in SHAPES:
        for m in (1, 16, 64):
            torch.manual_seed(n + k + m)

            def make():
                lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
                fp8 = Fp8Linear.from_linear(lin, spec, numerics=numerics)
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                return lin, fp8, x, quantize_rows_1xG(x, ACT), torch.zeros(1, device="cuda")

            sets = rotation(make, (n * k + 2 * m * (n + k)) * 2)
            with torch.no_grad():
                for _, fp8, x, _, _ in sets:
                    fp8(x)  # the weight's cache

                fns = {
                    "bf16": lambda lin, fp8, x, xq, z: F.linear(x, lin.weight),
                    "whole": lambda lin, fp8, x, xq, z: fp8(x),
                    "xq_given": lambda lin, fp8, x, xq, z: fp8(x, x_quantized=xq),
                    "q": lambda lin, fp8, x, xq, z: quantize_rows_1xG(x, ACT),
                    "floor": lambda lin, fp8, x, xq, z: z.add_(1.0),
                }
                row = {"n": n, "k": k, "m": m}
                for name, fn in fns.items():
                    row[name] = timed(fn, sets, graphed=True, warmup=5, reps=30) * 1e3
                pdl.ENABLED = False
                row["whole_nopdl"] = timed(fns["whole"], sets, graphed=True, warmup=5, reps=30) * 1e3
                pdl.ENABLED = True
            rows.append(row)
            b = row["bf16"]
            print(f"{n:>6}x{k:<6} M={m:<3} bf16 {b:5.1f}us  whole {row['whole']:5.1f} ({b / row['whole']:.2f}x)  "
                  f"nopdl {row['whole_nopdl']:5.1f}  xq_given {row['xq_given']:5.1f} ({b / row['xq_given']:.2f}x)  "
                  f"q {row['q']:4.1f}  floor {row['floor']:4.1f}", flush=True)
            with open(sys.argv[1], "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
