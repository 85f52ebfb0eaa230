"""Tile sweep and bit checks for the Gluon FP8 GEMM on an H200. Not part of the package: it chose
gluon_gemm.TRAINING.

`gluon_sweep.py OUT.json`: for the 8B projection shapes (fused qkv and gate/up included) at 8192 and 16384
tokens, times BF16 (torch.mm), cuBLAS FP8 (blockwise torch._scaled_mm) and each Gluon config, all in this
run with the same inputs; checks every Gluon config's output against the Triton kernel's bit for bit (same
segments), and rows 0..63 against the Triton decode path at M = 64 and 1. Prints a table last.
"""

import json
import sys

import torch

from precision_engine.bench.timing import median, rotation, time_cuda
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.gluon_gemm import GluonConfig, gluon_block_scaled_gemm
from precision_engine.numerics.quantize import Quantized, quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import PREFILL, block_scaled_gemm, segment_kb

ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
SHAPES = [(4096, 4096), (1024, 4096), (6144, 4096), (14336, 4096), (28672, 4096), (4096, 14336)]
MS = [8192, 16384]
CONFIGS = {  # the two schedules `training_config` chooses between (2026-12-03)
    "plain": GluonConfig(),
    "split": GluonConfig(split_n=True),
}
REPS, WARMUP = 30, 5


def same(a, b):
    return torch.equal(a.view(torch.uint16), b.view(torch.uint16))


def main(out_path: str) -> None:
    rows, checks = [], []
    for n, k in SHAPES:
        seg = segment_kb(n, k)
        for m in MS:
            def make():
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
                return x, w, quantize_rows_1xG(x, ACT), quantize_blocks(w, WEIGHT)

            sets = rotation(make, m * k * 3 + n * k * 3, l2_multiple=2.0, max_sets=3)
            x, w, xq, wq = sets[0]
            ref = block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg,
                                    config=PREFILL)
            small = {mm: block_scaled_gemm(xq.data[:mm], xq.scale[:mm], wq.data, wq.scale, b_scale_rows=128)
                     for mm in (1, 64)}
            row = {"n": n, "k": k, "m": m, "segment_kb": seg}
            flops = 2.0 * m * n * k
            timers = {
                "bf16": lambda x, w, xq, wq: torch.mm(x, w.t()),
                "cublas_fp8": lambda x, w, xq, wq: fp8_gemm(xq, wq, kernel=Kernel.CUBLAS, batch_invariant=False),
            }
            for name, cfg in CONFIGS.items():
                try:
                    got = gluon_block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128,
                                                  seg_kb=seg, config=cfg)
                except Exception as exc:  # a config that does not build is a sweep result, not a crash
                    checks.append({"n": n, "k": k, "m": m, "config": name, "error": repr(exc)[:300]})
                    continue
                checks.append({"n": n, "k": k, "m": m, "config": name, "bitwise_vs_triton": same(got, ref),
                               **{f"rows_vs_m{mm}": same(got[:mm], small[mm]) for mm in small},
                               "max_abs_diff": float((got.float() - ref.float()).abs().max())})
                timers[name] = (lambda c: lambda x, w, xq, wq: gluon_block_scaled_gemm(
                    xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg, config=c))(cfg)
            for name, fn in timers.items():
                ms = median(time_cuda(fn, warmup=WARMUP, reps=REPS, inputs_rotation=sets))
                row[name] = ms
                row[name + "_tflops"] = flops / ms / 1e9
            rows.append(row)
            print(json.dumps(row), flush=True)
            del sets, x, w, xq, wq, ref, small
            torch.cuda.empty_cache()
    with open(out_path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows,
                   "checks": checks}, f, indent=1)
    bad = [c for c in checks if "error" in c or not (c["bitwise_vs_triton"] and c["rows_vs_m1"] and c["rows_vs_m64"])]
    print(f"\nchecks: {len(checks)} run, {len(bad)} not bitwise or failed")
    for c in bad[:12]:
        print("  ", c)
    names = ["cublas_fp8", *CONFIGS]
    print("\n| N x K | M | BF16 ms | " + " | ".join(f"{nm} x" for nm in names) + " |")
    for r in rows:
        cells = [f"{r['bf16'] / r[nm]:.2f}" if nm in r else "-" for nm in names]
        print(f"| {r['n']}x{r['k']} | {r['m']} | {r['bf16']:.4f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
