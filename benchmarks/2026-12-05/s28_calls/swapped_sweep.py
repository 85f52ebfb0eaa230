"""Does the chain decode at M <= 48 run faster with the weight on wgmma's narrow side, where the fewest weight rows
a program fill every SM?

`chain_config` swaps the sides only above 32 tokens. Below, a 4096-row weight runs 64 programs of 64 rows on 132
SMs (the fused qkv 96), and the 14336-row weight 224 programs two an SM, 92 SMs holding two and 40 one. With the
weight on the narrow side, 32 rows a program take 4096 rows over 128 SMs, 48 rows the fused qkv's 6144, and 56
rows two an SM take 14336 over 256 programs, every SM but 8 holding two. The tokens then sit on the 64-row side,
only their live rows landed (`live_token_rows`). This checks each candidate's bytes against the shipped launch's,
then times `bench linear`'s whole-linear decode (fp8_bi against BF16, graph replays) with each, in two rounds that
alternate them. (Its 14336x4096 timings never reach the chain launch: AUTO keeps that weight off it,
`triton_gemm.CHAIN_MAX_TILES`; `gate_chain.py` times the chain there.)

    python3 benchmarks/2026-12-05/s28_calls/swapped_sweep.py [out.json]   (~3 minutes)
"""

import json
import statistics
import sys

import torch
import triton

from precision_engine.bench.linear import bench_linear
from precision_engine.numerics import gluon_chain as G
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

SHAPES = [(4096, 4096), (6144, 4096), (14336, 4096)]
MS = (8, 16, 32, 40, 48)  # the M of the rows short of 1.5x
SMS = torch.cuda.get_device_properties(0).multi_processor_count
SHIPPED = G.chain_config


def fitted(n: int, programs: int) -> int:
    return triton.cdiv(triton.cdiv(n, programs), 8) * 8


def candidates(m: int, n: int, k: int) -> dict[str, G.ChainConfig]:
    out = {"shipped": SHIPPED(m, n, k, SMS)}
    one = fitted(n, SMS)
    if one <= G.MAX_NARROW_WEIGHT_ROWS:
        out[f"narrow{one}"] = G.ChainConfig(stages=12, trip=4, ahead=3, weight_rows=one)
    two = fitted(n, 2 * SMS)
    ahead = 3 if two <= 32 else 1
    out[f"narrow{two}x2"] = G.ChainConfig(stages=12, trip=4, ahead=ahead, per_sm=2, weight_rows=two)
    if n == 14336:
        out["narrow64x2"] = G.ChainConfig(stages=6, trip=4, ahead=1, per_sm=2, weight_rows=64)
    return {name: cfg for name, cfg in out.items() if name == "shipped" or cfg != out["shipped"]}


def bytes_differ() -> list[str]:
    wrong = []
    for n, k in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(n + k)
        x = torch.randn(64, k, device="cuda", generator=g, dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16) * 0.02
        xq = quantize_rows_1xG(x, PRESET_FORMATS["fp8_group_act"])
        wq = quantize_blocks(w, PRESET_FORMATS["fp8_block_weight"])
        for m in MS:
            args = (xq.data[:m], xq.scale[:m], wq.data, wq.scale)
            outs = {name: G.gluon_chain_decode_gemm(*args, b_scale_rows=128, config=cfg)
                    for name, cfg in candidates(m, n, k).items()}
            wrong += [f"{n}x{k} M={m} {name}" for name, out in outs.items()
                      if not torch.equal(out.view(torch.int16), outs["shipped"].view(torch.int16))]
    return wrong


def main() -> None:
    wrong = bytes_differ()
    print("bytes: every candidate gives the shipped bytes" if not wrong else f"bytes DIFFER: {wrong}", flush=True)
    times: dict[tuple, list[float]] = {}
    try:
        for round_ in range(2):
            for n, k in SHAPES:
                for m in MS:
                    cands = list(candidates(m, n, k).items())
                    for name, cfg in cands if round_ == 0 else cands[::-1]:
                        G.chain_config = lambda *_, cfg=cfg: cfg
                        (row,) = bench_linear(shapes=[(n, k)], ms=[m], variants=("bf16", "fp8_bi"), reps=50, warmup=10)
                        times.setdefault((n, k, m, name), []).append(row["fp8_bi_x"])
            print(f"round {round_} done", flush=True)
    finally:
        G.chain_config = SHIPPED
    rows = []
    for n, k in SHAPES:
        for m in MS:
            cells = {name: statistics.mean(times[(n, k, m, name)]) for name in candidates(m, n, k)}
            rows.append({"n": n, "k": k, "m": m, "x": cells})
            print(f"{n:>5}x{k:<5} M={m:<3} " + "  ".join(f"{name} {x:.3f}" for name, x in cells.items()), flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"rows": rows, "bytes_differ": wrong}, f, indent=1)


if __name__ == "__main__":
    main()
