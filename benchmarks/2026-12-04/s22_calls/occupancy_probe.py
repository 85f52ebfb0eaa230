"""Probe (twenty-second session, call 7): two chain-decode programs per SM. A program holds 8 warps (one MMA
warpgroup, the TMA warp padded to a warpgroup) at 255 registers, so one fits per SM, and a weight of more than
132 x 64 rows (12288x4096: 192 tiles) runs in 1.45 waves. Capped at 128 registers (ptxas: no spill up to 32-token
tiles) and with the ring cut to half the shared memory, two fit. Against the shipped launch, on the wide-tiled
and the narrow weights, M = 1, 16, 32, 64; timing as scale_tune.py; bits against pinned cuBLAS first.
Usage: python3 occupancy_probe.py OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace

import torch
import triton

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "2026-12-03", "s16_calls"))
from chain_sweep import ACT, WFMT, graphed, mismatch  # noqa: E402

from precision_engine.bench.timing import median, rotation, time_cuda  # noqa: E402
from precision_engine.numerics import gluon_chain as C  # noqa: E402
from precision_engine.numerics import gluon_gemm as G  # noqa: E402
from precision_engine.numerics.formats import Kernel  # noqa: E402
from precision_engine.numerics.gemm import fp8_gemm  # noqa: E402
from precision_engine.numerics.pdl import launch_options  # noqa: E402
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG  # noqa: E402

SHAPES = ((12288, 4096), (6144, 4096), (4096, 4096), (4096, 14336))
HALF_SMEM = 113 * 1024


def launch(xq, wq, cfg: C.ChainConfig, maxnreg: int | None, smem: int):
    a, a_scale, b, b_scale = xq.data, xq.scale, wq.data, wq.scale
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    block_t = cfg.token_block
    kb_pad = triton.next_power_of_2(triton.cdiv(k, 128))
    stages = min(cfg.stages, (smem - 1024 - kb_pad * (64 + block_t) * 4) // ((64 + block_t) * 128))
    cap = {"maxnreg": maxnreg} if maxnreg else {}
    C._gluon_chain_decode_kernel[(triton.cdiv(n, 64), triton.cdiv(m, block_t))](
        G._descriptor(b, 64), G._descriptor(a, block_t), c, a_scale, b_scale, m, n, k, c.stride(0),
        a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1),
        SCALE_BN=128, STAGES=stages, TRIP=cfg.trip, AHEAD=cfg.ahead, KB_PAD=kb_pad, num_warps=4, **cap,
        **launch_options(m, a.device))
    return c


def candidates(m: int, n: int, sms: int) -> dict:
    shipped = C.chain_config(m, n, sms)
    out = {"shipped": (shipped, None, G.SHARED_BYTES), "two_per_sm": (shipped, 128, HALF_SMEM),
           "cap128": (shipped, 128, G.SHARED_BYTES)}
    if m > 32:
        t32 = replace(shipped, token_block=32, ahead=3)
        out["two_t32"] = (t32, 128, HALF_SMEM)
    return out


def tune(n: int, k: int) -> list[dict]:
    rows = []
    torch.manual_seed(n + 7 * k)
    x0 = torch.randn(256, k, device="cuda", dtype=torch.bfloat16)
    wq0 = quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02, WFMT)
    pin = fp8_gemm(quantize_rows_1xG(x0, ACT), wq0, kernel=Kernel.CUBLAS_PINNED)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m in (1, 16, 32, 64):
        xq0 = quantize_rows_1xG(x0[:m].contiguous(), ACT)
        sets = rotation(lambda: (quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT),
                                 quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * .02, WFMT)),
                        n * k, l2_multiple=2)
        bsets = rotation(lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                                  torch.randn(n, k, device="cuda", dtype=torch.bfloat16)), 2 * n * k, l2_multiple=2)

        def t(fn, s=sets):
            return median(time_cuda(lambda g: g.replay(), warmup=5, reps=40, inputs_rotation=graphed(fn, s))) * 1e3

        row = {"n": n, "k": k, "m": m, "bf16_us": t(lambda xb, wb: torch.mm(xb, wb.t()), bsets)}
        for name, (cfg, cap, smem) in candidates(m, n, sms).items():
            fn = lambda xq, wq, cfg=cfg, cap=cap, smem=smem: launch(xq, wq, cfg, cap, smem)  # noqa: E731
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
