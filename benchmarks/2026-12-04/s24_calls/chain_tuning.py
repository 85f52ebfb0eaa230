"""The chain decode's tuning loop, shared by the probes from the twenty-fourth session on (the earlier ones,
s16's chain_tune.py, s22's wg/m64/occupancy probes and s23's wn_probe.py, each carried a copy of it): for each
M, the bits of every candidate launch against pinned cuBLAS, then its time, GEMM alone, as CUDA-graph replays
over operand sets rotated past the L2, median of 40, x BF16's torch.mm in the same run.

A candidate is a function (m, n, k, sms) -> (ChainConfig, or None to skip that M; a function making the context
the launch runs inside, at its bits check and at its graph's capture, so a module switch it sets is baked into
the graph).
"""

from __future__ import annotations

import contextlib
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "2026-12-03", "s16_calls"))
from chain_sweep import ACT, WFMT, graphed, mismatch  # noqa: E402

from precision_engine.bench.timing import median, rotation, time_cuda  # noqa: E402
from precision_engine.numerics import gluon_chain as C  # noqa: E402
from precision_engine.numerics.formats import Kernel  # noqa: E402
from precision_engine.numerics.gemm import fp8_gemm  # noqa: E402
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG  # noqa: E402


def shipped(m, n, k, sms):
    """`chain_config`'s launch, as the tree holds it."""
    return C.chain_config(m, n, k, sms), contextlib.nullcontext


def tune(n: int, k: int, candidates: dict, ms) -> list[dict]:
    """Rows {n, k, m, bf16_us, <candidate>: us, or why not} for the weight [n, k] at each M, printed as x BF16."""
    rows = []
    torch.manual_seed(n + 7 * k)
    x0 = torch.randn(64, k, device="cuda", dtype=torch.bfloat16)
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

        def t(fn, s, within=contextlib.nullcontext):
            with within():
                inputs = graphed(fn, s)
            return median(time_cuda(lambda g: g.replay(), warmup=5, reps=40, inputs_rotation=inputs)) * 1e3

        row = {"n": n, "k": k, "m": m, "bf16_us": t(lambda xb, wb: torch.mm(xb, wb.t()), bsets)}
        for name, candidate in candidates.items():
            config, within = candidate(m, n, k, sms)
            if config is None:
                continue
            fn = lambda xq, wq, cfg=config: C.gluon_chain_decode_gemm(  # noqa: E731
                xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=cfg)
            try:
                with within():
                    bad = mismatch(fn(xq0, wq0), pin[:m])
                row[name] = t(fn, sets, within) if bad == 0.0 else f"other bits ({bad:.2e})"
            except Exception as err:  # noqa: BLE001
                row[name] = f"{type(err).__name__}: {str(err)[:200]}"
        rows.append(row)
        base = row["bf16_us"]
        timed = {key: v for key, v in row.items() if isinstance(v, float) and key != "bf16_us"}
        print(f"  {n}x{k} M={m}: bf16 {base:.1f} us; " + ", ".join(f"{key} {base / v:.2f}x" for key, v in timed.items())
              + "".join(f"; {key}: {v}" for key, v in row.items() if isinstance(v, str)), flush=True)
    return rows
