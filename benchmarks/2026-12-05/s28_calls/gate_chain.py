"""14336x4096 (the 8B's gate or up, unfused) at decode sizes: AUTO's launch against the chain launch.

AUTO keeps weights of 112 or more 128-row tiles off the chain launch (`triton_gemm.CHAIN_MAX_TILES`), a rule set on
M = 1 and 16, where the Triton launch ran 1.55-1.70x. At M = 8 the whole linear runs 1.39-1.43x there (and on the
odd multiples of 8 generally 1.51-1.53x against 1.61-1.64x on the even ones). The chain launch gives the same
bits (one segment; its bits test covers its configs). This checks that, then times `bench linear`'s whole-linear
decode (fp8_bi against BF16, graph replays) with AUTO's rule as shipped, with the chain launch taking 14336 rows
(`chain_config`'s launch: at M <= 8 two an SM, 16-block trips on the 11 slots that fit), and with the chain launch
at trips of 4 on 12 slots where M <= 8; two rounds that alternate them.

    python3 benchmarks/2026-12-05/s28_calls/gate_chain.py [out.json]   (~1.5 minutes)
"""

import json
import statistics
import sys

import torch

from precision_engine.bench.linear import bench_linear
from precision_engine.numerics import gluon_chain as G
from precision_engine.numerics import triton_gemm as T
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

N, K = 14336, 4096
MS = (1, 8, 16, 24, 32, 40, 48, 64)
SHIPPED_TILES, SHIPPED_CONFIG = T.CHAIN_MAX_TILES, G.chain_config


def trips_of_4(m, n, k, sms):
    config = SHIPPED_CONFIG(m, n, k, sms)
    return G.ChainConfig(stages=12, trip=4, ahead=3, token_block=8, per_sm=2) if m <= 8 else config


VARIANTS = {"auto": (SHIPPED_TILES, SHIPPED_CONFIG), "chain": (SHIPPED_TILES + 1, SHIPPED_CONFIG),
            "chain_t4": (SHIPPED_TILES + 1, trips_of_4)}


def use(name: str) -> None:
    T.CHAIN_MAX_TILES, G.chain_config = VARIANTS[name]


def bytes_differ() -> list[str]:
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(64, K, device="cuda", generator=g, dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", generator=g, dtype=torch.bfloat16) * 0.02
    xq = quantize_rows_1xG(x, PRESET_FORMATS["fp8_group_act"])
    wq = quantize_blocks(w, PRESET_FORMATS["fp8_block_weight"])
    wrong = []
    for m in MS:
        sub = type(xq)(xq.data[:m], xq.scale[:m], xq.fmt)
        outs = {}
        for name in VARIANTS:
            use(name)
            outs[name] = fp8_gemm(sub, wq, kernel=Kernel.AUTO)
        wrong += [f"M={m} {name}" for name, out in outs.items()
                  if not torch.equal(out.view(torch.int16), outs["auto"].view(torch.int16))]
    use("auto")
    return wrong


def main() -> None:
    wrong = bytes_differ()
    print("bytes: every variant gives AUTO's bytes" if not wrong else f"bytes DIFFER: {wrong}", flush=True)
    times: dict[tuple, list[tuple[float, float]]] = {}
    try:
        for round_ in range(2):
            for m in MS:
                for name in VARIANTS if round_ == 0 else list(VARIANTS)[::-1]:
                    use(name)
                    (row,) = bench_linear(shapes=[(N, K)], ms=[m], variants=("bf16", "fp8_bi"), reps=50, warmup=10)
                    times.setdefault((m, name), []).append((row["fp8_bi_ms"], row["fp8_bi_x"]))
            print(f"round {round_} done", flush=True)
    finally:
        use("auto")
    rows = []
    for m in MS:
        cells = {name: (statistics.mean(t for t, _ in times[(m, name)]) * 1e3,
                        statistics.mean(x for _, x in times[(m, name)])) for name in VARIANTS}
        rows.append({"m": m, "us_x": cells})
        print(f"{N}x{K} M={m:<3} " + "  ".join(f"{name} {us:.2f} us {x:.3f}x" for name, (us, x) in cells.items()),
              flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"rows": rows, "bytes_differ": wrong}, f, indent=1)


if __name__ == "__main__":
    main()
