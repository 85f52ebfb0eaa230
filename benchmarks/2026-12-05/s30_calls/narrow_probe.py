"""Up to 32 tokens, the narrow 8B weights decode on 64-row weight tiles: 4096 rows give 64 programs on 132 SMs,
the fused qkv's 6144 give 96. Above 32 tokens `gluon_chain.chain_config` already puts the fewest rows that fill one
wave (32 of 4096, 48 of 6144, 8 of 1024) on wgmma's narrow side, each program reading its weight bytes alone
(twenty-third and twenty-sixth sessions). The twenty-third session found such tiles slow at M = 32 (4096x14336:
33.5 us against 23.8 at M = 64, "half its token tile past the tokens: not investigated further"), before the
twenty-sixth landed token rows in 8-row pieces. Does the narrow side pay below 33 tokens now, where the short
decode rows are (4096x4096 at M = 8-32, the fused qkv at M = 1, 8, 32)?

The configs timed: the narrow tiles with 12 slots in trips of 4 (what `test_chain_decode_gives_the_one_segment_bits`
checks at every M for 32, 48 and 8 rows) or 16 slots in trips of 4 (13 fit beside the fused qkv's 64-row slots;
trips of 8 spill 1,656 bytes there, ptxas offline); their bytes are checked against AUTO's first. Both compile
with no spill and no serialised wgmma at M = 1, 8, 16, 32 (Triton 3.6's ptxas, offline, thirtieth session).
Then `bench linear`'s whole-linear decode (fp8_bi against BF16, graph replays) for each weight at M = 1..32 with
the shipped configs and the two narrow ones, two rounds that alternate them.

    python3 benchmarks/2026-12-05/s30_calls/narrow_probe.py [out.json]   (~3 minutes)
"""

import json
import statistics
import sys

import torch
import triton

from precision_engine.bench.linear import bench_linear
from precision_engine.numerics import gluon_chain as G
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

SHAPES = [(4096, 4096), (6144, 4096), (4096, 14336), (4096, 12288), (1024, 4096)]
MS = (1, 8, 16, 24, 32)
SHIPPED = G.chain_config
RINGS = {"narrow": dict(stages=12, trip=4, ahead=3), "narrow_deep": dict(stages=16, trip=4, ahead=3)}
VARIANTS = ("shipped", *RINGS)


def use(name: str) -> None:
    """chain_config as shipped, or with the narrow weight tiles that fill one wave at every M."""
    if name == "shipped":
        G.chain_config = SHIPPED
        return

    def narrow(m: int, n: int, k: int, sms: int) -> G.ChainConfig:
        fitted = triton.cdiv(triton.cdiv(n, sms), G.GRAIN.value) * G.GRAIN.value
        if fitted > G.MAX_NARROW_WEIGHT_ROWS:
            return SHIPPED(m, n, k, sms)
        return G.ChainConfig(**RINGS[name], weight_rows=fitted)

    G.chain_config = narrow


def bytes_differ() -> list[str]:
    g = torch.Generator(device="cuda").manual_seed(11)
    wrong = []
    for n, k in SHAPES:
        x = torch.randn(32, k, device="cuda", generator=g, dtype=torch.bfloat16)
        xq = quantize_rows_1xG(x, PRESET_FORMATS["fp8_group_act"])
        wq = quantize_blocks(torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16) * 0.02,
                             PRESET_FORMATS["fp8_block_weight"])
        for m in MS:
            sub = type(xq)(xq.data[:m], xq.scale[:m], xq.fmt)
            outs = {}
            for name in VARIANTS:
                use(name)
                outs[name] = fp8_gemm(sub, wq, kernel=Kernel.AUTO)
            wrong += [f"{n}x{k} M={m} {name}" for name, out in outs.items()
                      if not torch.equal(out.view(torch.int16), outs["shipped"].view(torch.int16))]
    use("shipped")
    return wrong


def main() -> None:
    wrong = bytes_differ()
    print("bytes: every variant gives AUTO's" if not wrong else f"bytes DIFFER: {wrong}", flush=True)
    times: dict[tuple, list[tuple[float, float]]] = {}
    try:
        for round_ in range(2):
            for n, k in SHAPES:
                for m in MS:
                    for name in VARIANTS if round_ == 0 else VARIANTS[::-1]:
                        use(name)
                        (row,) = bench_linear(shapes=[(n, k)], ms=[m], variants=("bf16", "fp8_bi"), reps=50,
                                              warmup=10)
                        times.setdefault((n, k, m, name), []).append((row["fp8_bi_ms"], row["fp8_bi_x"]))
            print(f"round {round_} done", flush=True)
    finally:
        use("shipped")
    rows = []
    for n, k in SHAPES:
        for m in MS:
            cells = {name: (statistics.mean(t for t, _ in times[(n, k, m, name)]) * 1e3,
                            statistics.mean(x for _, x in times[(n, k, m, name)])) for name in VARIANTS}
            rows.append({"n": n, "k": k, "m": m, "us_x": cells})
            print(f"{n}x{k} M={m:<3} " + "  ".join(f"{name} {us:.2f} us {x:.3f}x" for name, (us, x) in cells.items()),
                  flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"rows": rows, "bytes_differ": wrong}, f, indent=1)


if __name__ == "__main__":
    main()
