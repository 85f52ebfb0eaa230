"""Call 7: the whole linear (decompose.py's timing) on 12288x4096 at M = 64 with the shipped launch against 64-row
weight tiles on wgmma's narrow side at two programs an SM (round 2 of wn_probe.py: 1.52 -> 1.57x GEMM alone),
alternating three times; the outputs' bits compared first.
Usage: python3 w64_whole.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from precision_engine.bench.gemm import timed
from precision_engine.bench.linear import _specs
from precision_engine.bench.timing import rotation
from precision_engine.numerics import gluon_chain as C
from precision_engine.numerics.linear import Fp8Linear

SHIPPED = C.chain_config
CANDIDATE = C.ChainConfig(6, 4, 1, weight_rows=64, per_sm=2)


def main() -> None:
    spec, numerics = _specs()["fp8_bi"]
    n, k, m = 12288, 4096, 64
    torch.manual_seed(0)

    def make():
        lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        return lin, Fp8Linear.from_linear(lin, spec, numerics=numerics), torch.randn(m, k, device="cuda",
                                                                                      dtype=torch.bfloat16)

    sets = rotation(make, (n * k + 2 * m * (n + k)) * 2)
    with torch.no_grad():
        shipped = sets[0][1](sets[0][2])
        C.chain_config = lambda *a: CANDIDATE
        other = sets[0][1](sets[0][2])
        print("same bits:", torch.equal(shipped.view(torch.int16), other.view(torch.int16)), flush=True)
        bf16 = timed(lambda lin, fp8, x: F.linear(x, lin.weight), sets, graphed=True, warmup=5, reps=30)
        for rep in range(3):
            for name, rule in (("shipped", SHIPPED), ("w64_a1_2sm", lambda *a: CANDIDATE)):
                C.chain_config = rule
                ms = timed(lambda lin, fp8, x: fp8(x), sets, graphed=True, warmup=5, reps=30)
                print(f"{rep} {name}: {bf16 / ms:.3f}x ({ms * 1e3:.1f} us, bf16 {bf16 * 1e3:.1f})", flush=True)


if __name__ == "__main__":
    main()
