"""Probe (sixteenth session): the Gluon one-chain decode (`numerics/gluon_chain.py`: weight on wgmma's 64-row
side, tokens on the narrow side, a deep ring, wgmmas in flight behind the promoted block, trips of unrolled K
blocks). Does it give pinned cuBLAS's bits, and is it as fast as the shipped split-K decode on the narrow
weights, where earlier one-chain launches ran 0.9-1.2x BF16?

Bits: rows at M = 1, 3, 16, 33, 64 against pinned cuBLAS on 256 rows that hold them (BF16 and FP32 out).
Speed: GEMM alone, operands quantized, weights rotated past the L2, eager CUDA events (median of 40), x BF16:
the shipped AUTO launch, pinned cuBLAS, chain configs. BF16 and the shipped launch are timed again at the end
of each shape to show drift.
Usage: python3 chain_probe.py OUT.json
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
SHAPES = ((4096, 4096), (6144, 4096), (4096, 14336), (1024, 4096), (14336, 4096))
CONFIGS = {
    "c12_t8_a3": ChainConfig(stages=12, trip=8, ahead=3),
    "c20_t8_a3": ChainConfig(stages=20, trip=8, ahead=3),
    "c20_t8_a3_pf": ChainConfig(stages=20, trip=8, ahead=3, prefetch=True),
    "c20_t8_a2": ChainConfig(stages=20, trip=8, ahead=2),
    "c20_t4_a3": ChainConfig(stages=20, trip=4, ahead=3),
    "c20_t8_a1": ChainConfig(stages=20, trip=8, ahead=1),
}
CONFIGS_64 = {  # 64 token rows: fewer registers (benchmarks/2026-12-03/s16_calls/README.md: ptxas spills)
    "c8_t4_a2": ChainConfig(stages=8, trip=4, ahead=2),
    "c8_t2_a1": ChainConfig(stages=8, trip=2, ahead=1),
    "c12_t2_a1": ChainConfig(stages=12, trip=2, ahead=1),
}


def chain(xq, wq, cfg, out_dtype=torch.bfloat16):
    return gluon_chain_decode_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, out_dtype=out_dtype,
                                   config=cfg)


def mismatch(y, ref) -> float:
    return (y.view(torch.int16 if y.dtype == torch.bfloat16 else torch.int32)
            != ref.view(torch.int16 if ref.dtype == torch.bfloat16 else torch.int32)).float().mean().item()


def bits(n: int, k: int) -> dict:
    torch.manual_seed(n + k)
    x = torch.randn(256, k, device="cuda", dtype=torch.bfloat16)
    x[5, :7] = -0.0
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    xq, wq = quantize_rows_1xG(x, ACT), quantize_blocks(w, WFMT)
    out = {}
    for dt in (torch.bfloat16, torch.float32):
        pin = fp8_gemm(xq, wq, kernel=Kernel.CUBLAS_PINNED, out_dtype=dt)
        for m in (1, 3, 16, 33, 64):
            xs = quantize_rows_1xG(x[:m].contiguous(), ACT)
            cfgs = CONFIGS_64 if m > 32 else CONFIGS
            for name, cfg in cfgs.items():
                try:
                    out[f"{str(dt)[6:]}@{m}:{name}"] = mismatch(chain(xs, wq, cfg, dt), pin[:m])
                except Exception as err:  # noqa: BLE001
                    out[f"{str(dt)[6:]}@{m}:{name}"] = f"{type(err).__name__}: {str(err)[:300]}"
    return out


def speed(n: int, k: int) -> list[dict]:
    rows = []
    for m in (1, 16, 64):
        torch.manual_seed(m)
        sets = rotation(lambda: (quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT),
                                 quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * .02, WFMT)),
                        n * k, l2_multiple=2)
        bsets = rotation(lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                                  torch.randn(n, k, device="cuda", dtype=torch.bfloat16)), 2 * n * k, l2_multiple=2)
        t = lambda fn, s=sets: median(time_cuda(fn, warmup=5, reps=40, inputs_rotation=s)) * 1e3  # noqa: E731
        bf16 = lambda xb, wb: torch.mm(xb, wb.t())  # noqa: E731
        row = {"n": n, "k": k, "m": m, "bf16_us": t(bf16, bsets)}
        cands = {"auto": lambda xq, wq: fp8_gemm(xq, wq),
                 "pinned": lambda xq, wq: fp8_gemm(xq, wq, kernel=Kernel.CUBLAS_PINNED)}
        for name, cfg in (CONFIGS_64 if m > 32 else CONFIGS).items():
            cands[name] = lambda xq, wq, cfg=cfg: chain(xq, wq, cfg)
        for name, fn in cands.items():
            try:
                row[name] = t(fn)
            except Exception as err:  # noqa: BLE001
                row[name] = f"{type(err).__name__}: {str(err)[:200]}"
        row["bf16_again_us"] = t(bf16, bsets)
        row["auto_again"] = t(cands["auto"])
        rows.append(row)
        base = row["bf16_us"]
        print(f"  {n}x{k} M={m}: bf16 {base:.1f} us (again {row['bf16_again_us']:.1f}); " + ", ".join(
            f"{key} {base / v:.2f}x" for key, v in row.items()
            if isinstance(v, float) and key not in ("bf16_us", "bf16_again_us"))
            + "".join(f"; {key}: {v}" for key, v in row.items() if isinstance(v, str)), flush=True)
    return rows


def main() -> None:
    path = sys.argv[1]
    result = {"bits": {}, "speed": []}
    start = time.time()
    for n, k in SHAPES:
        b = bits(n, k)
        result["bits"][f"{n}x{k}"] = b
        bad = {key: v for key, v in b.items() if v != 0.0}
        print(f"bits {n}x{k}: {len(b) - len(bad)} of {len(b)} bitwise equal" + (f"; other: {bad}" if bad else ""),
              flush=True)
    print(f"bits done in {time.time() - start:.0f} s", flush=True)
    for n, k in SHAPES:
        result["speed"] += speed(n, k)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    print(f"all done in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
