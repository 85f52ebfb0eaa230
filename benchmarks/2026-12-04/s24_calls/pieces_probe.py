"""Probe (prepared in the twenty-fourth session, which had no device): with `pieces.patch` applied, the chain
decode lands only the rows its tiles hold (`gluon_chain._land_rows`: a power of two, then 8-row boxes) where
it landed whole boxes the copy engine zero-filled past the tokens. GEMM alone, graph replays, x BF16, bits
against pinned cuBLAS first (`chain_tuning.tune`).
Usage: python3 pieces_probe.py OUT.json ROUND
Round "tokens": today's launches (`chain_config`) with whole boxes (the tree before the patch) against the same
  launches with pieces, at M = 1, 20, 32, 40, 48, 56, 64 on the six narrow 8B weights.
Round "narrow": the weight on wgmma's narrow side at any M, as many rows per program as put every tile on the
  SMs in one wave (8 rows of 1024, 32 of 4096, 48 of the fused qkv's 6144: a 64-row slot, 128 programs), which
  whole boxes made lose at 32 tokens (1.58 -> 1.06x on 4096x14336, s23 call 4), against `chain_config`'s
  launch with pieces.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chain_tuning import shipped, tune  # noqa: E402

from precision_engine.numerics import gluon_chain as C  # noqa: E402

SHAPES = ((4096, 4096), (4096, 14336), (4096, 12288), (6144, 4096), (12288, 4096), (1024, 4096))


@contextlib.contextmanager
def whole_boxes():
    """The launch before the patch: a token tile's rows in one box of the whole tile."""
    live = C.live_token_rows
    C.live_token_rows = lambda config, m: C.tiles(config, m)[1]
    try:
        yield
    finally:
        C.live_token_rows = live


def before(m, n, k, sms):
    return C.chain_config(m, n, k, sms), whole_boxes


def fitted_rows(n: int, sms: int) -> int:
    """The fewest weight rows per program, a multiple of 8, that put every tile on the SMs at once."""
    return triton.cdiv(triton.cdiv(n, sms), 8) * 8


def narrow(stages: int, trip: int, ahead: int, rows: int = 0):
    """The weight on wgmma's narrow side: `rows` per program (k/v only), or the fitted rows where they are at most
    64 (a 128-row slot spills 1.2 KB even with one wgmma in flight: ptxas, Triton 3.6)."""
    def candidate(m, n, k, sms):
        take = rows or fitted_rows(n, sms)
        if take > 64 or (rows and n != 1024):
            return None, contextlib.nullcontext
        return C.ChainConfig(stages, trip, ahead, weight_rows=take), contextlib.nullcontext
    return candidate


ROUNDS = {
    "tokens": (SHAPES, {"whole_boxes": before, "pieces": shipped}, (1, 20, 32, 40, 48, 56, 64)),
    "narrow": (SHAPES, {"shipped": shipped, "fit_s12_t4": narrow(12, 4, 3), "fit_s16_t8": narrow(16, 8, 3),
                        "fit_s8_t4_a2": narrow(8, 4, 2),
                        "kv_w16": narrow(12, 4, 3, rows=16)},
               (1, 16, 32, 48, 64)),
}


def main() -> None:
    start = time.time()
    shapes, candidates, ms = ROUNDS[sys.argv[2]]
    result = []
    for n, k in shapes:
        result += tune(n, k, candidates, ms)
        with open(sys.argv[1], "w") as f:
            json.dump(result, f, indent=1)
    print(f"all done in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
