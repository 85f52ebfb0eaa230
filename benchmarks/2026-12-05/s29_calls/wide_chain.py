"""The wide weights (14336 rows: the 8B's gate or up; 28672: the fused gate/up) at decode sizes: the chain launch
against their whole-tile launches, by `triton_gemm.WIDE_CHAIN_MAX_M` (the most tokens at which they take the chain).

Call A (twenty-ninth session, H200) ran this with the rule before (the chain launch never) against the chain launch
at M = 1..40: the chain won from M = 8 (14336x4096 at M = 8: 22.1 -> 19.7 us) and was level at M = 1, so
WIDE_CHAIN_MAX_M = 32 landed. This checks the bytes (the chain launch's one segment is the whole tiles' sums), then
times `bench linear`'s whole-linear decode (fp8_bi against BF16, graph replays) for both weights at M = 1..64 with
the rule before (0), as shipped, and the chain launch at every M (64), two rounds that alternate them.

    python3 benchmarks/2026-12-05/s29_calls/wide_chain.py [out.json]   (~2.5 minutes)
"""

import json
import statistics
import sys

import torch

from precision_engine.bench.linear import bench_linear
from precision_engine.numerics import triton_gemm as T
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

K = 4096
NS = (14336, 28672)
MS = (1, 8, 16, 24, 32, 40, 48, 56, 64)
VARIANTS = {"before": 0, "shipped": T.WIDE_CHAIN_MAX_M, "chain": 64}


def use(name: str) -> None:
    T.WIDE_CHAIN_MAX_M = VARIANTS[name]


def bytes_differ() -> list[str]:
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(64, K, device="cuda", generator=g, dtype=torch.bfloat16)
    xq = quantize_rows_1xG(x, PRESET_FORMATS["fp8_group_act"])
    wrong = []
    for n in NS:
        w = torch.randn(n, K, device="cuda", generator=g, dtype=torch.bfloat16) * 0.02
        wq = quantize_blocks(w, PRESET_FORMATS["fp8_block_weight"])
        for m in MS:
            sub = type(xq)(xq.data[:m], xq.scale[:m], xq.fmt)
            outs = {}
            for name in VARIANTS:
                use(name)
                outs[name] = fp8_gemm(sub, wq, kernel=Kernel.AUTO)
            wrong += [f"{n} M={m} {name}" for name, out in outs.items()
                      if not torch.equal(out.view(torch.int16), outs["before"].view(torch.int16))]
    use("shipped")
    return wrong


def main() -> None:
    wrong = bytes_differ()
    print("bytes: the chain launch gives the whole tiles' bytes" if not wrong else f"bytes DIFFER: {wrong}", flush=True)
    times: dict[tuple, list[tuple[float, float]]] = {}
    try:
        for round_ in range(2):
            for n in NS:
                for m in MS:
                    for name in VARIANTS if round_ == 0 else list(VARIANTS)[::-1]:
                        use(name)
                        (row,) = bench_linear(shapes=[(n, K)], ms=[m], variants=("bf16", "fp8_bi"), reps=50,
                                              warmup=10)
                        times.setdefault((n, m, name), []).append((row["fp8_bi_ms"], row["fp8_bi_x"]))
            print(f"round {round_} done", flush=True)
    finally:
        use("shipped")
    rows = []
    for n in NS:
        for m in MS:
            cells = {name: (statistics.mean(t for t, _ in times[(n, m, name)]) * 1e3,
                            statistics.mean(x for _, x in times[(n, m, name)])) for name in VARIANTS}
            rows.append({"n": n, "m": m, "us_x": cells})
            print(f"{n}x{K} M={m:<3} " + "  ".join(f"{name} {us:.2f} us {x:.3f}x" for name, (us, x) in cells.items()),
                  flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"rows": rows, "bytes_differ": wrong}, f, indent=1)


if __name__ == "__main__":
    main()
