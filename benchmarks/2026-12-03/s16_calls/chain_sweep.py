"""Probe (sixteenth session, call 2): the one-chain decode's ring depth and token split (several programs per
weight tile, each a slice of the tokens, the tile's second read from L2), timed as CUDA-graph replays (the
eager timings of the shipped split launch jump between runs: 0.2-0.5x in call 1 where graphs give 1.2-1.5x).
GEMM alone, operands quantized, weights rotated past the L2, median of 40 replays, x BF16 (also graphed).
Bits of every config against pinned cuBLAS at its M.
Usage: python3 chain_sweep.py OUT.json
"""

from __future__ import annotations

import json
import sys
import time

import torch

from precision_engine.bench.timing import median, rotation, time_cuda
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.gluon_chain import ChainConfig, gluon_chain_decode_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

ACT, WFMT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
SHAPES = ((4096, 4096), (6144, 4096), (4096, 14336), (1024, 4096))
C = ChainConfig


def configs(m: int) -> dict:
    out = {f"s{s}": C(stages=s) for s in (6, 8, 12)}
    if m > 32:
        out = {"t64_s8": C(stages=8, trip=4, ahead=2), "t64_s12": C(stages=12, trip=4, ahead=2)}
    elif m > 16:
        out.update({"t32_a2": C(stages=12, ahead=2)})
    for tb in (8, 16, 32):
        if tb < m:
            for s in (6, 8, 12):
                out[f"tb{tb}_s{s}"] = C(stages=s, token_block=tb, ahead=3 if tb < 32 else 2)
    return out


def graphed(fn, sets):
    """One CUDA graph per input set, replayed in rotation."""
    graphs = []
    for args in sets:
        fn(*args)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn(*args)
        graphs.append((g,))
    return graphs


def mismatch(y, ref) -> float:
    return (y.view(torch.int16) != ref.view(torch.int16)).float().mean().item()


def sweep(n: int, k: int) -> list[dict]:
    rows = []
    torch.manual_seed(n - k)
    x0 = torch.randn(256, k, device="cuda", dtype=torch.bfloat16)
    wq0 = quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02, WFMT)
    pin = fp8_gemm(quantize_rows_1xG(x0, ACT), wq0, kernel=Kernel.CUBLAS_PINNED)
    for m in (1, 8, 16, 32, 64):
        xq0 = quantize_rows_1xG(x0[:m].contiguous(), ACT)
        sets = rotation(lambda: (quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT),
                                 quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * .02, WFMT)),
                        n * k, l2_multiple=2)
        bsets = rotation(lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                                  torch.randn(n, k, device="cuda", dtype=torch.bfloat16)), 2 * n * k, l2_multiple=2)

        def t(fn, s=sets):
            return median(time_cuda(lambda g: g.replay(), warmup=5, reps=40, inputs_rotation=graphed(fn, s))) * 1e3

        row = {"n": n, "k": k, "m": m, "bf16_us": t(lambda xb, wb: torch.mm(xb, wb.t()), bsets),
               "auto": t(lambda xq, wq: fp8_gemm(xq, wq)),
               "pinned": t(lambda xq, wq: fp8_gemm(xq, wq, kernel=Kernel.CUBLAS_PINNED))}
        for name, cfg in configs(m).items():
            fn = lambda xq, wq, cfg=cfg: gluon_chain_decode_gemm(  # noqa: E731
                xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=cfg)
            try:
                bad = mismatch(fn(xq0, wq0), pin[:m])
                row[name] = t(fn) if bad == 0.0 else f"other bits ({bad:.2e})"
            except Exception as err:  # noqa: BLE001
                row[name] = f"{type(err).__name__}: {str(err)[:200]}"
        rows.append(row)
        base = row["bf16_us"]
        timed = {key: v for key, v in row.items() if isinstance(v, float) and key != "bf16_us"}
        best = max((key for key in timed if key not in ("auto", "pinned")), key=lambda key: base / timed[key],
                   default=None)
        print(f"  {n}x{k} M={m}: bf16 {base:.1f} us; " + ", ".join(f"{key} {base / v:.2f}x" for key, v in timed.items())
              + (f"; BEST {best} {base / timed[best]:.2f}x" if best else "")
              + "".join(f"; {key}: {v}" for key, v in row.items() if isinstance(v, str)), flush=True)
    return rows


def main() -> None:
    path = sys.argv[1]
    start = time.time()
    result = []
    for n, k in SHAPES:
        result += sweep(n, k)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    print(f"all done in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
