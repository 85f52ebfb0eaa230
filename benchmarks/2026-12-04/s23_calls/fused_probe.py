"""Probe, prepared in the twenty-third session for the next (apply `fused_quant_decode.patch` first): the whole
linear's decode in one launch (`gluon_chain.gluon_chain_quantize_gemm`: the GEMM program's quantizer warps
quantize the BF16 tokens as each K block lands) against today's whole linear (Fp8Linear: Q(x), then the chain
GEMM, PDL between them) and against the linear given Q(x); x BF16's F.linear. Timing as decompose.py (bench
linear's decode harness: CUDA-graph replays of one call per rotated input set); bits against the module first.
Usage: python3 fused_probe.py OUT.json
"""

from __future__ import annotations

import contextlib
import json
import sys

import torch
import torch.nn.functional as F
from torch import nn

from precision_engine.bench.gemm import timed
from precision_engine.bench.linear import _specs
from precision_engine.bench.timing import rotation
from precision_engine.numerics import gluon_chain as C
from precision_engine.numerics import linear as L
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.quantize import quantize_rows_1xG

ACT = PRESET_FORMATS["fp8_group_act"]
SHAPES = ((4096, 4096), (1024, 4096), (6144, 4096), (4096, 14336), (4096, 12288))


@contextlib.contextmanager
def two_launches(name: str):
    """"whole" as today's two launches even where s24's `one_launch_linear.patch` is applied (its no-grad
    forward would otherwise take the one launch): a host-side switch, baked into the graph at capture."""
    if name != "whole" or not hasattr(L, "quantize_gemm"):
        yield
        return
    one_launch = L.quantize_gemm
    L.quantize_gemm = lambda *args, **kwargs: None
    try:
        yield
    finally:
        L.quantize_gemm = one_launch


def main() -> None:
    spec, numerics = _specs()["fp8_bi"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for n, k in SHAPES:
        for m in (1, 8, 16, 32):
            if not C.quantizes_here(m, n, k, sms):
                continue
            torch.manual_seed(n + k + m)

            def make():
                lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
                fp8 = Fp8Linear.from_linear(lin, spec, numerics=numerics)
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                return lin, fp8, fp8.quantized_weight(), x, quantize_rows_1xG(x, ACT)

            sets = rotation(make, (n * k + 2 * m * (n + k)) * 2)
            fns = {
                "bf16": lambda lin, fp8, wq, x, xq: F.linear(x, lin.weight),
                "whole": lambda lin, fp8, wq, x, xq: fp8(x),
                "xq_given": lambda lin, fp8, wq, x, xq: fp8(x, x_quantized=xq),
                "one_launch": lambda lin, fp8, wq, x, xq: C.gluon_chain_quantize_gemm(
                    x, ACT, wq.data, wq.scale, b_scale_rows=128),
            }
            with torch.no_grad():
                one = fns["one_launch"](*sets[0])
                with two_launches("whole"):
                    whole = fns["whole"](*sets[0])
                same = torch.equal(one.view(torch.int16), whole.view(torch.int16))
                row = {"n": n, "k": k, "m": m, "same_bits": same}
                for rep in range(2):
                    for name, fn in fns.items():
                        with two_launches(name):
                            row[f"{name}{rep}"] = timed(fn, sets, graphed=True, warmup=5, reps=30) * 1e3
            rows.append(row)
            b = row["bf160"]
            ratios = "  ".join(f"{name} {b / row[f'{name}{rep}']:.2f}x" for rep in range(2)
                               for name in ("whole", "xq_given", "one_launch"))
            print(f"{n:>6}x{k:<6} M={m:<3} bits {'same' if same else 'DIFFER'}  bf16 {b:5.1f}us  {ratios}", flush=True)
            with open(sys.argv[1], "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
