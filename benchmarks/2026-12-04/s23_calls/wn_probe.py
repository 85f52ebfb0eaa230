"""Probe (twenty-third session): the chain decode with narrow weight tiles on wgmma's N side and the tokens, one
tile of 64, on its M side (`ChainConfig.weight_rows`), so each weight byte is read by one program (the shipped
launch above 32 tokens reads each 64-row tile in two 32-token programs, the second from L2). Against the
shipped launch at M = 17 .. 64 on the narrow weights; GEMM alone, graph replays, x BF16 (as s22's wg_probe.py);
bits against pinned cuBLAS first.
Usage: python3 wn_probe.py OUT.json [--round 2]
Round 2 (call 6): the weights where 32-row tiles need more than one wave (the fused qkv, 12288 rows) at M = 64,
two programs an SM.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "2026-12-03", "s16_calls"))
from chain_sweep import ACT, WFMT, graphed, mismatch  # noqa: E402

from precision_engine.bench.timing import median, rotation, time_cuda  # noqa: E402
from precision_engine.numerics import gluon_chain as C  # noqa: E402
from precision_engine.numerics.formats import Kernel  # noqa: E402
from precision_engine.numerics.gemm import fp8_gemm  # noqa: E402
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG  # noqa: E402

SHAPES = ((4096, 4096), (4096, 14336), (4096, 12288), (6144, 4096), (12288, 4096), (1024, 4096))
WIDE = {
    "w32": C.ChainConfig(12, 4, 3, weight_rows=32),
    "w32_s16": C.ChainConfig(16, 4, 3, weight_rows=32),
    "w32_t8": C.ChainConfig(12, 8, 3, weight_rows=32),
    "w64": C.ChainConfig(12, 4, 3, weight_rows=64),
    "w64_a2": C.ChainConfig(10, 4, 2, weight_rows=64),
    "w16_2sm": C.ChainConfig(12, 4, 3, weight_rows=16, per_sm=2),
    "w32_2sm": C.ChainConfig(8, 4, 3, weight_rows=32, per_sm=2),
}
MS = (32, 48, 64)
ROUND_2 = ((6144, 4096), (12288, 4096)), {
    "tb32_2sm": C.ChainConfig(8, 4, 3, token_block=32, per_sm=2),
    "w64_a1_2sm": C.ChainConfig(6, 4, 1, weight_rows=64, per_sm=2),
    "w32_2sm_a2": C.ChainConfig(8, 4, 2, weight_rows=32, per_sm=2),
    "tb64_a1_2sm": C.ChainConfig(6, 4, 1, token_block=64, per_sm=2),
}, (64,)


def tune(n: int, k: int, wide: dict, ms: tuple) -> list[dict]:
    rows = []
    torch.manual_seed(n + 7 * k)
    x0 = torch.randn(256, k, device="cuda", dtype=torch.bfloat16)
    wq0 = quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02, WFMT)
    pin = fp8_gemm(quantize_rows_1xG(x0, ACT), wq0, kernel=Kernel.CUBLAS_PINNED)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m in ms:
        xq0 = quantize_rows_1xG(x0[:m].contiguous(), ACT)
        sets = rotation(lambda: (quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT),
                                 quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * .02, WFMT)),
                        n * k, l2_multiple=2)
        bsets = rotation(lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                                  torch.randn(n, k, device="cuda", dtype=torch.bfloat16)), 2 * n * k, l2_multiple=2)

        def t(fn, s=sets):
            return median(time_cuda(lambda g: g.replay(), warmup=5, reps=40, inputs_rotation=graphed(fn, s))) * 1e3

        row = {"n": n, "k": k, "m": m, "bf16_us": t(lambda xb, wb: torch.mm(xb, wb.t()), bsets)}
        for name, cfg in {"shipped": C.chain_config(m, n, k, sms), **wide}.items():
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
    shapes, wide, ms = ROUND_2 if sys.argv[2:] == ["--round", "2"] else (SHAPES, WIDE, MS)
    for n, k in shapes:
        result += tune(n, k, wide, ms)
        with open(sys.argv[1], "w") as f:
            json.dump(result, f, indent=1)
    print(f"all done in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
