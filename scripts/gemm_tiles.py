"""Tile sweep for the Triton FP8 GEMM on the GPU: time per config, and whether each config gives the same
bytes as the prefill config (the batch-invariance claim across decode and prefill tiles). Prints a table and
writes JSON to argv[1]. Used to choose triton_gemm.PREFILL / DECODE; not part of the package."""

import json
import sys

import torch

from precision_engine.bench.gemm import timed
from precision_engine.bench.timing import rotation
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import PREFILL, GemmConfig, block_scaled_gemm

ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
DECODE_CFGS = [GemmConfig(64, n, w, s, 1, p) for n, w, s, p in
               [(32, 4, 4, False), (32, 4, 6, False), (64, 4, 4, False), (16, 4, 6, False), (16, 4, 8, False),
                (32, 4, 4, True), (16, 4, 4, True), (64, 4, 3, True)]]
PREFILL_CFGS = [PREFILL, GemmConfig(128, 128, 8, 3), GemmConfig(128, 128, 8, 3, 8, True),
                GemmConfig(128, 128, 8, 4, 8, True), GemmConfig(128, 128, 4, 3), GemmConfig(64, 128, 4, 4),
                GemmConfig(64, 128, 4, 3, 8, True), GemmConfig(128, 64, 4, 4, 8, True)]


def run(m, n, k, cfgs, rows):
    def make():
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        return x, w, quantize_rows_1xG(x, ACT), quantize_blocks(w, WEIGHT)

    sets = rotation(make, (m + n) * k * 3)
    graphed = m <= 64
    bf16 = timed(lambda x, w, xq, wq: torch.mm(x, w.t()), sets, graphed=graphed, warmup=10, reps=50)
    x, w, xq, wq = sets[0]
    ref = block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=PREFILL)
    for cfg in cfgs:
        try:
            out = block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=cfg)
            same = torch.equal(out.view(torch.uint16), ref.view(torch.uint16))
            ms = timed(
                lambda x, w, xq, wq: block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=cfg),
                sets, graphed=graphed, warmup=10, reps=50)
        except Exception as err:  # a config that does not compile is a result too
            rows.append({"m": m, "n": n, "k": k, "cfg": str(cfg), "error": repr(err)[:200]})
            continue
        rows.append({"m": m, "n": n, "k": k, "cfg": str(cfg), "ms": ms, "bf16_ms": bf16, "x": bf16 / ms,
                     "same_bytes_as_prefill": same, "weight_GBps": n * k / ms / 1e6})
        r = rows[-1]
        print(f"{m:>6} {n:>6}x{k:<6} {cfg.block_m:>4}x{cfg.block_n:<4} w{cfg.num_warps} s{cfg.num_stages} "
              f"p{int(cfg.pair)} {ms:8.4f} ms bf16 {bf16:8.4f} x{r['x']:5.2f} wGB/s {r['weight_GBps']:7.0f} same={same}", flush=True)


def probe_cublas_m(rows):
    """Which M torch._scaled_mm blockwise accepts unpadded (documents gemm.CUBLAS_M_ALIGN)."""
    k, n = 4096, 4096
    w = quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), WEIGHT)
    for m in (1, 2, 4, 7, 8, 15, 16, 17, 24, 32, 33, 64):
        x = quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT)
        try:
            torch._scaled_mm(x.data, w.data.t(), scale_a=x.scale, scale_b=w.scale.t(), out_dtype=torch.bfloat16)
            ok = "ok"
        except RuntimeError as err:
            ok = str(err).split("\n")[0][:80]
        rows.append({"probe_cublas_m": m, "result": ok})
        print(f"cublas blockwise M={m}: {ok}", flush=True)
    x = quantize_rows_1xG(torch.randn(64, k, device="cuda", dtype=torch.bfloat16), ACT)
    try:
        torch._scaled_mm(x.data, w.data.t(), scale_a=x.scale, scale_b=w.scale.t(), out_dtype=torch.float32)
        print("cublas blockwise fp32 out: ok")
    except RuntimeError as err:
        print("cublas blockwise fp32 out:", str(err)[:80])


def main():
    rows = []
    probe_cublas_m(rows)
    for n, k in [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]:
        for m in (1, 16, 64):
            run(m, n, k, DECODE_CFGS, rows)
    for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]:
        run(8192, n, k, PREFILL_CFGS, rows)
    json.dump(rows, open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
