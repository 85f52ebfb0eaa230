"""Probe (twenty-second session, call 9): above 32 tokens, four 16-token programs per weight tile, two an SM
(`per_sm` = 2), against the shipped two 32-token programs (one an SM), at M = 48 and 64 on the narrow weights.
Timing as scale_tune.py (GEMM alone, graph replays, x BF16); bits against pinned cuBLAS first. With `--ceiling`,
then `precision bench ceiling --decode` with that rule patched into `chain_config` for the 4096-row weights.
Usage: python3 m64_probe.py OUT.json [--ceiling CEILING.json]
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "2026-12-03", "s16_calls"))
from chain_sweep import ACT, WFMT, graphed, mismatch  # noqa: E402

from precision_engine.bench.timing import median, rotation, time_cuda  # noqa: E402
from precision_engine.numerics import gluon_chain as C  # noqa: E402
from precision_engine.numerics.formats import Kernel  # noqa: E402
from precision_engine.numerics.gemm import fp8_gemm  # noqa: E402
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG  # noqa: E402

SHAPES = ((4096, 4096), (4096, 14336), (4096, 12288), (6144, 4096), (12288, 4096))
SHIPPED = C.chain_config


def quarters(m: int, n: int, k: int, sms: int) -> C.ChainConfig:
    """Above 32 tokens, 16-token programs two an SM where four per weight tile fit in one wave of them."""
    if m > 32 and 4 * -(-n // 64) <= 2 * sms:
        return C.ChainConfig(stages=12, trip=4, ahead=3, token_block=16, per_sm=2)
    return SHIPPED(m, n, k, sms)


def tune(n: int, k: int) -> list[dict]:
    rows = []
    torch.manual_seed(n + 7 * k)
    x0 = torch.randn(256, k, device="cuda", dtype=torch.bfloat16)
    wq0 = quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02, WFMT)
    pin = fp8_gemm(quantize_rows_1xG(x0, ACT), wq0, kernel=Kernel.CUBLAS_PINNED)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m in (48, 64):
        xq0 = quantize_rows_1xG(x0[:m].contiguous(), ACT)
        sets = rotation(lambda: (quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT),
                                 quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * .02, WFMT)),
                        n * k, l2_multiple=2)
        bsets = rotation(lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                                  torch.randn(n, k, device="cuda", dtype=torch.bfloat16)), 2 * n * k, l2_multiple=2)

        def t(fn, s=sets):
            return median(time_cuda(lambda g: g.replay(), warmup=5, reps=40, inputs_rotation=graphed(fn, s))) * 1e3

        row = {"n": n, "k": k, "m": m, "bf16_us": t(lambda xb, wb: torch.mm(xb, wb.t()), bsets)}
        shipped = SHIPPED(m, n, k, sms)
        cands = {"shipped": shipped, "t16x4_2sm": C.ChainConfig(12, 4, 3, 16, per_sm=2),
                 "t16x4_s8_2sm": C.ChainConfig(8, 4, 3, 16, per_sm=2), "shipped_2sm": replace(shipped, per_sm=2)}
        for name, cfg in cands.items():
            fn = lambda xq, wq, cfg=cfg: C.gluon_chain_decode_gemm(  # noqa: E731
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
    print(f"probe done in {time.time() - start:.0f} s", flush=True)
    if sys.argv[2:3] == ["--ceiling"]:
        C.chain_config = quarters
        from precision_engine.cli.app import main as cli
        sys.argv = ["precision", "bench", "ceiling", "--decode", "--out", sys.argv[3]]
        cli()


if __name__ == "__main__":
    main()
