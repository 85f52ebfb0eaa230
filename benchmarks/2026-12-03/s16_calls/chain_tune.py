"""Probe (sixteenth session, call 5): tune `gluon_chain.chain_config` on the narrow 8B weights: ring depth, trip
length and wgmmas in flight per token width, at M = 1, 16, 32, 64 (chain_sweep.py's timing: CUDA-graph replays,
GEMM alone, weights rotated past the L2, x BF16; bits against pinned cuBLAS first).
Usage: python3 chain_tune.py OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chain_sweep import ACT, WFMT, graphed, mismatch  # noqa: E402

from precision_engine.bench.timing import median, rotation, time_cuda  # noqa: E402
from precision_engine.numerics.formats import Kernel  # noqa: E402
from precision_engine.numerics.gemm import fp8_gemm  # noqa: E402
from precision_engine.numerics.gluon_chain import ChainConfig as C  # noqa: E402
from precision_engine.numerics.gluon_chain import chain_config, gluon_chain_decode_gemm  # noqa: E402
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG  # noqa: E402

SHAPES = ((4096, 4096), (6144, 4096), (4096, 14336), (4096, 12288))
CANDIDATES = {
    1: {"s12_t16": C(12, 16, 3), "s16_t16": C(16, 16, 3), "s16_t8": C(16, 8, 3), "s12_t4": C(12, 4, 3),
        "s12_a2": C(12, 8, 2), "s10_t8": C(10, 8, 3)},
    16: {"s12_t8": C(12, 8, 3), "s8_t4": C(8, 4, 3), "s10_t8": C(10, 8, 3), "s8_a2": C(8, 8, 2),
         "s8_t16": C(8, 16, 3)},
    32: {"tb32_t4": C(8, 4, 3, 32), "tb32_t2": C(8, 2, 1, 32), "tb16_s12": C(12, 8, 3, 16),
         "tb16_t4": C(8, 4, 3, 16)},
    64: {"tb32_t8a2": C(8, 8, 2, 32), "tb32_t2": C(8, 2, 1, 32), "tb32_s12": C(12, 4, 3, 32),
         "tb32_s6": C(6, 4, 3, 32), "t64_t2": C(8, 2, 1, 64), "t64_s12": C(12, 4, 2, 64)},
}


def tune(n: int, k: int) -> list[dict]:
    rows = []
    torch.manual_seed(n + 7 * k)
    x0 = torch.randn(256, k, device="cuda", dtype=torch.bfloat16)
    wq0 = quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02, WFMT)
    pin = fp8_gemm(quantize_rows_1xG(x0, ACT), wq0, kernel=Kernel.CUBLAS_PINNED)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m, cands in CANDIDATES.items():
        xq0 = quantize_rows_1xG(x0[:m].contiguous(), ACT)
        sets = rotation(lambda: (quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT),
                                 quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * .02, WFMT)),
                        n * k, l2_multiple=2)
        bsets = rotation(lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                                  torch.randn(n, k, device="cuda", dtype=torch.bfloat16)), 2 * n * k, l2_multiple=2)

        def t(fn, s=sets):
            return median(time_cuda(lambda g: g.replay(), warmup=5, reps=40, inputs_rotation=graphed(fn, s))) * 1e3

        row = {"n": n, "k": k, "m": m, "bf16_us": t(lambda xb, wb: torch.mm(xb, wb.t()), bsets)}
        for name, cfg in {"shipped": chain_config(m, n, sms), **cands}.items():
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
        print(f"  {n}x{k} M={m}: bf16 {base:.1f} us; " + ", ".join(f"{key} {base / v:.2f}x" for key, v in timed.items())
              + "".join(f"; {key}: {v}" for key, v in row.items() if isinstance(v, str)), flush=True)
    return rows


def main() -> None:
    start = time.time()
    result = []
    for n, k in SHAPES:
        result += tune(n, k)
        with open(sys.argv[1], "w") as f:
            json.dump(result, f, indent=1)
    print(f"all done in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
