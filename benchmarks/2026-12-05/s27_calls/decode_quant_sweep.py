"""The decode rows' x quantizer, swept: does another launch config of the 1x128 rows kernel bring the whole linear's
decode over 1.5x where it is short?

The twenty-sixth session found the quantizer's launch most of the gap (given Q(x), 4096x4096 runs 1.70-1.79x,
the whole linear 1.45-1.49x). The GEMM, launched with PDL, waits for the quantizer's whole grid, so what counts
is how soon that grid ends. Every M below 2048 takes `triton_quant._ROWS_CONFIG_SMALL_M` (16 rows a program,
4 warps), a choice the code marks "not measured yet". This times `bench linear`'s fp8_bi decode against BF16
(graph replays, as `bench ceiling --decode`) with each candidate config, in two rounds that alternate them,
after checking that each gives the shipped config's bytes.

    python3 benchmarks/2026-12-05/s27_calls/decode_quant_sweep.py [out.json]   (~4-5 minutes)
"""

import json
import statistics
import sys

import torch

from precision_engine.bench.linear import bench_linear
from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.formats import PRESET_FORMATS

SHAPES = [(4096, 4096), (6144, 4096), (14336, 4096)]  # the shapes with decode rows short of 1.5x
MS = (8, 16, 32, 48, 64)
CONFIGS = [{"BLOCK_M": 16, "GROUPS": 1, "num_warps": 4},  # shipped
           {"BLOCK_M": 16, "GROUPS": 1, "num_warps": 2}, {"BLOCK_M": 8, "GROUPS": 1, "num_warps": 4},
           {"BLOCK_M": 8, "GROUPS": 1, "num_warps": 2}, {"BLOCK_M": 8, "GROUPS": 1, "num_warps": 1},
           {"BLOCK_M": 4, "GROUPS": 1, "num_warps": 1}, {"BLOCK_M": 16, "GROUPS": 2, "num_warps": 4},
           {"BLOCK_M": 8, "GROUPS": 4, "num_warps": 4}]


def name(config: dict) -> str:
    return f"m{config['BLOCK_M']}_g{config['GROUPS']}_w{config['num_warps']}"


def same_bytes() -> list[str]:
    """Configs whose bytes differ from the shipped one's on a ragged decode-sized x (M = 37, K = 4096 + 64)."""
    x = torch.randn(37, 4160, device="cuda", dtype=torch.bfloat16) * 3
    fmt = PRESET_FORMATS["fp8_group_act"]
    want = T.quantize_rows(x, fmt, config=CONFIGS[0])
    return [name(c) for c in CONFIGS[1:]
            if not (torch.equal((got := T.quantize_rows(x, fmt, config=c)).data.view(torch.uint8),
                                want.data.view(torch.uint8)) and torch.equal(got.scale, want.scale))]


def main() -> None:
    wrong = same_bytes()
    print("bytes: every config gives the shipped bytes" if not wrong else f"bytes DIFFER: {wrong}", flush=True)
    shipped = dict(T._ROWS_CONFIG_SMALL_M)
    times: dict[tuple, list[tuple[float, float]]] = {}
    try:
        for round_ in range(2):
            for n, k in SHAPES:
                for m in MS:
                    for config in CONFIGS if round_ == 0 else CONFIGS[::-1]:
                        if name(config) in wrong:
                            continue
                        T._ROWS_CONFIG_SMALL_M = config
                        (row,) = bench_linear(shapes=[(n, k)], ms=[m], variants=("bf16", "fp8_bi"), reps=50,
                                              warmup=10)
                        times.setdefault((n, k, m, name(config)), []).append((row["fp8_bi_ms"], row["fp8_bi_x"]))
            print(f"round {round_} done", flush=True)
    finally:
        T._ROWS_CONFIG_SMALL_M = shipped
    rows = []
    print(f"{'N x K':>11} {'M':>3} " + " ".join(f"{name(c):>13}" for c in CONFIGS) + "   (x BF16, mean of rounds)")
    for n, k in SHAPES:
        for m in MS:
            cells = {c: statistics.mean(x for _, x in times[(n, k, m, c)])
                     for c in map(name, CONFIGS) if (n, k, m, c) in times}
            rows.append({"n": n, "k": k, "m": m, "x": cells})
            print(f"{n:>5}x{k:<5} {m:>3} " + " ".join(f"{cells.get(name(c), float('nan')):>13.3f}" for c in CONFIGS))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"configs": CONFIGS, "rows": rows, "bytes_differ": wrong}, f, indent=1)


if __name__ == "__main__":
    main()
