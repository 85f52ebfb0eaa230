"""Probe (twenty-second session, call 1; runs on the tree with k_splits.patch applied): the chain decode's K
splits (`gluon_chain`, SPLITS programs per weight tile, each over its share of K, chained in order by the last
to arrive) against the shipped one-program chain, on the narrow 8B weights at M = 1, 16, 32, 64. Timing as s16's
chain_tune.py: CUDA-graph replays, GEMM alone, weights rotated past the L2, median of 40, x BF16; bits of every
config against pinned cuBLAS first.
Usage: python3 split_tune.py OUT.json [NxK ...]
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "2026-12-03", "s16_calls"))
from chain_sweep import ACT, WFMT, graphed, mismatch  # noqa: E402

from precision_engine.bench.timing import median, rotation, time_cuda  # noqa: E402
from precision_engine.numerics.formats import Kernel  # noqa: E402
from precision_engine.numerics.gemm import fp8_gemm  # noqa: E402
from precision_engine.numerics.gluon_chain import ChainConfig, chain_config, gluon_chain_decode_gemm  # noqa: E402
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG  # noqa: E402

SHAPES = ((4096, 4096), (1024, 4096), (6144, 4096), (4096, 14336), (4096, 12288), (12288, 4096))
MS = (1, 16, 32, 64)


def with_splits(cfg: ChainConfig, splits: int, k: int, **changes) -> ChainConfig:
    """cfg over `splits` K splits, its trip no longer than a split's blocks."""
    cfg = replace(cfg, **changes)
    per = triton.cdiv(triton.cdiv(k, 128), splits)
    trip = min(cfg.trip, per)
    while trip > 1 and per % trip:
        trip //= 2
    trip = max(trip, 2)
    return replace(cfg, splits=splits, trip=trip, ahead=min(cfg.ahead, trip - 1))


def candidates(m: int, n: int, k: int, sms: int) -> dict:
    shipped = chain_config(m, n, sms)
    out = {"shipped": shipped}
    for s in (2, 4, 8):
        out[f"k{s}"] = with_splits(shipped, s, k)
    if m > 16:
        whole = 32 if m <= 32 else 64
        for s in (2, 4):
            out[f"t{whole}_k{s}"] = with_splits(shipped, s, k, token_block=whole, ahead=2 if whole == 64 else 3)
        if shipped.token_block != 16:
            out["t16_k2"] = with_splits(shipped, 2, k, token_block=16, ahead=3)
    return out


def tune(n: int, k: int) -> list[dict]:
    rows = []
    torch.manual_seed(n + 7 * k)
    x0 = torch.randn(256, k, device="cuda", dtype=torch.bfloat16)
    wq0 = quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02, WFMT)
    pin = fp8_gemm(quantize_rows_1xG(x0, ACT), wq0, kernel=Kernel.CUBLAS_PINNED)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m in MS:
        xq0 = quantize_rows_1xG(x0[:m].contiguous(), ACT)
        sets = rotation(lambda: (quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT),
                                 quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * .02, WFMT)),
                        n * k, l2_multiple=2)
        bsets = rotation(lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                                  torch.randn(n, k, device="cuda", dtype=torch.bfloat16)), 2 * n * k, l2_multiple=2)

        def t(fn, s=sets):
            return median(time_cuda(lambda g: g.replay(), warmup=5, reps=40, inputs_rotation=graphed(fn, s))) * 1e3

        row = {"n": n, "k": k, "m": m, "bf16_us": t(lambda xb, wb: torch.mm(xb, wb.t()), bsets), "configs": {}}
        for name, cfg in candidates(m, n, k, sms).items():
            fn = lambda xq, wq, cfg=cfg: gluon_chain_decode_gemm(  # noqa: E731
                xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=cfg)
            row["configs"][name] = repr(cfg)
            try:
                bad = max(mismatch(fn(xq0, wq0), pin[:m]) for _ in range(3))
                row[name] = t(fn) if bad == 0.0 else f"other bits ({bad:.2e})"
            except Exception as err:  # noqa: BLE001
                row[name] = f"{type(err).__name__}: {str(err)[:200]}"
        rows.append(row)
        base = row["bf16_us"]
        timed = {key: v for key, v in row.items() if isinstance(v, float) and key != "bf16_us"}
        best = max(timed, key=lambda key: base / timed[key]) if timed else "-"
        print(f"  {n}x{k} M={m}: bf16 {base:.1f} us; " + ", ".join(f"{key} {base / v:.2f}x" for key, v in timed.items())
              + f"; best {best}" + "".join(f"; {key}: {v}" for key, v in row.items()
                                           if isinstance(v, str) and key not in ("configs",)), flush=True)
    return rows


def main() -> None:
    start = time.time()
    shapes = [tuple(int(v) for v in a.split("x")) for a in sys.argv[2:]] or SHAPES
    result = []
    for n, k in shapes:
        result += tune(n, k)
        with open(sys.argv[1], "w") as f:
            json.dump(result, f, indent=1)
    print(f"all done in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
