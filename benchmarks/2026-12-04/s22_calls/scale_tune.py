"""Probe (twenty-second session, call 4): the chain decode with its scales staged in shared memory (this
commit's `gluon_chain`) against the kernel before it (`gluon_chain_before.py`, HEAD 1f0707a's, scales read
from global memory per K block), on the narrow 8B weights at M = 1, 16, 32, 64, and launch configs around the
shipped one. Timing as s16's chain_tune.py: CUDA-graph replays, GEMM alone, weights rotated past the L2, median
of 40, x BF16; bits of every launch against pinned cuBLAS first.
Usage: python3 scale_tune.py OUT.json [--round 2] [NxK ...]
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "2026-12-03", "s16_calls"))
import gluon_chain_before as before  # noqa: E402
from chain_sweep import ACT, WFMT, graphed, mismatch  # noqa: E402

from precision_engine.bench.timing import median, rotation, time_cuda  # noqa: E402
from precision_engine.numerics.formats import Kernel  # noqa: E402
from precision_engine.numerics.gemm import fp8_gemm  # noqa: E402
from precision_engine.numerics.gluon_chain import ChainConfig as C  # noqa: E402
from precision_engine.numerics.gluon_chain import chain_config, gluon_chain_decode_gemm  # noqa: E402
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG  # noqa: E402

SHAPES = ((4096, 4096), (1024, 4096), (6144, 4096), (4096, 14336), (4096, 12288), (12288, 4096))
CANDIDATES = {
    1: {"s12_t8": C(12, 8, 3), "s20_t16": C(20, 16, 3)},
    16: {"s8_t8": C(8, 8, 3, 16), "s12_t8": C(12, 8, 3, 16), "s12_t4": C(12, 4, 3, 16)},
    32: {"tb32": C(8, 4, 3, 32), "tb16_t8": C(8, 8, 3, 16), "tb32_t8": C(8, 8, 3, 32)},
    64: {"tb64_a3": C(8, 4, 3, 64), "tb32": C(8, 4, 3, 32), "tb64_s6": C(6, 4, 2, 64)},
}
# Round 2 (call 5, `--round 2`): ring depth and trip length around the shipped config at every token width.
CANDIDATES_2 = {
    1: {"s12_t8": C(12, 8, 3), "s16_t8": C(16, 8, 3), "s20_t8": C(20, 8, 3), "s16_t4": C(16, 4, 3)},
    8: {"s12_t8": C(12, 8, 3), "s16_t8": C(16, 8, 3), "s20_t8": C(20, 8, 3), "s16_t4": C(16, 4, 3)},
    16: {"s16_t4": C(16, 4, 3, 16), "s12_t2": C(12, 2, 1, 16)},
    32: {"tb32_s12": C(12, 4, 3, 32), "tb32_s14": C(14, 4, 3, 32), "tb16_s16": C(16, 4, 3, 16)},
    64: {"tb32_s12": C(12, 4, 3, 32), "tb64_s10": C(10, 4, 2, 64), "tb32_s14": C(14, 4, 3, 32)},
}


def tune(n: int, k: int, candidates: dict) -> list[dict]:
    rows = []
    torch.manual_seed(n + 7 * k)
    x0 = torch.randn(256, k, device="cuda", dtype=torch.bfloat16)
    wq0 = quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02, WFMT)
    pin = fp8_gemm(quantize_rows_1xG(x0, ACT), wq0, kernel=Kernel.CUBLAS_PINNED)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m, cands in candidates.items():
        xq0 = quantize_rows_1xG(x0[:m].contiguous(), ACT)
        sets = rotation(lambda: (quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT),
                                 quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * .02, WFMT)),
                        n * k, l2_multiple=2)
        bsets = rotation(lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                                  torch.randn(n, k, device="cuda", dtype=torch.bfloat16)), 2 * n * k, l2_multiple=2)

        def t(fn, s=sets):
            return median(time_cuda(lambda g: g.replay(), warmup=5, reps=40, inputs_rotation=graphed(fn, s))) * 1e3

        shipped = chain_config(m, n, sms)
        row = {"n": n, "k": k, "m": m, "shipped": repr(shipped),
               "bf16_us": t(lambda xb, wb: torch.mm(xb, wb.t()), bsets)}
        launches = {"before": lambda xq, wq: before.gluon_chain_decode_gemm(
            xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128)}
        for name, cfg in {"staged": shipped, **cands}.items():
            launches[name] = lambda xq, wq, cfg=cfg: gluon_chain_decode_gemm(
                xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=cfg)
        for name, fn in launches.items():
            try:
                bad = mismatch(fn(xq0, wq0), pin[:m])
                row[name] = t(fn) if bad == 0.0 else f"other bits ({bad:.2e})"
            except Exception as err:  # noqa: BLE001
                row[name] = f"{type(err).__name__}: {str(err)[:200]}"
        rows.append(row)
        base = row["bf16_us"]
        timed = {key: v for key, v in row.items() if isinstance(v, float) and key != "bf16_us"}
        print(f"  {n}x{k} M={m}: bf16 {base:.1f} us; " + ", ".join(f"{key} {base / v:.2f}x" for key, v in timed.items())
              + "".join(f"; {key}: {v}" for key, v in row.items() if isinstance(v, str) and key != "shipped"),
              flush=True)
    return rows


def main() -> None:
    start = time.time()
    args = sys.argv[2:]
    candidates = CANDIDATES
    if args[:2] == ["--round", "2"]:
        candidates, args = CANDIDATES_2, args[2:]
    shapes = [tuple(int(v) for v in a.split("x")) for a in args] or SHAPES
    result = []
    for n, k in shapes:
        result += tune(n, k, candidates)
        with open(sys.argv[1], "w") as f:
            json.dump(result, f, indent=1)
    print(f"all done in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
