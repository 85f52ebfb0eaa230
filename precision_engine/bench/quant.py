"""Quantizer bandwidth benchmark: bytes moved / time against a device copy measured in the same run.

Bytes are the floor each kernel must move (input read once, FP8 data and fp32 scales written once), so
``% copy`` is directly the fraction of achievable HBM bandwidth reached (issue 3 target for the 1x128
activation quantizer: >= 80%). The fused grad-output quantizer's floor is one read of dy and both layouts
written; the "two kernels" row times the unfused pair against that same floor, so the two compare directly.
Each timed call gets the next of several freshly drawn input sets whose total exceeds the L2 several times. Run: ``python -m precision_engine.bench.quant [--json out.json] [--sweep]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Callable

import torch

from precision_engine.bench.timing import gbps, median, rotation, time_cuda
from precision_engine.numerics.formats import PRESET_FORMATS

ACT_SHAPES = [(8192, 4096), (16384, 4096), (8192, 14336), (16384, 14336)]  # tokens x K, Llama-3.1-8B
WEIGHT_SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]  # q/o, gate/up, down projections
# 1x128 launch configs timed by --sweep (BLOCK_M rows x GROUPS groups per program, warps).
ROWS_SWEEP = [(8, 4, 4), (16, 2, 4), (16, 4, 4), (16, 4, 8), (32, 2, 8), (32, 4, 8), (64, 1, 8), (64, 2, 8), (128, 1, 8)]
# Tokens-transposed configs (BLOCK_C columns x CHUNKS per 128-token program, warps).
TOKENS_SWEEP = [(32, 1, 2), (64, 1, 2), (64, 1, 4), (64, 2, 4), (128, 1, 4), (128, 1, 8)]
# Fused grad-output configs (128x128 tiles per program, warps).
DUAL_SWEEP = [(1, 8), (1, 16)]


def copy_bandwidth(nbytes: int = 1 << 30, *, reps: int = 30) -> float:
    """GB/s of a device-to-device copy, counting bytes read plus bytes written."""
    src = torch.randn(nbytes // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = median(time_cuda(lambda: dst.copy_(src), warmup=5, reps=reps))
    return gbps(2 * nbytes, ms)


def _act_bytes(m: int, k: int, in_bytes: int = 2) -> int:
    return m * k * in_bytes + m * k + 4 * m * -(-k // 128)


def _cases(sweep: bool) -> list[tuple[str, tuple[int, int], Callable, Callable[[], tuple], int]]:
    """(kernel, shape, fn, make_inputs, bytes) for every measurement."""
    from precision_engine.numerics import quantize as Q
    from precision_engine.numerics import triton_quant as T

    act, tok = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]
    blk, ten = PRESET_FORMATS["fp8_block_weight"], PRESET_FORMATS["fp8_tensor"]

    def bf16(shape):
        return lambda: (torch.randn(shape, device="cuda", dtype=torch.bfloat16),)

    def saved(shape):
        return lambda: (Q.quantize_rows_1xG(torch.randn(shape, device="cuda", dtype=torch.bfloat16), act),)

    def separate(x):
        Q.quantize_rows_1xG(x, act)
        Q.quantize_tokens_transposed(x, tok)

    cases = []
    for m, k in ACT_SHAPES:
        shape = (m, k)
        nbytes = _act_bytes(m, k)
        requant_bytes = _act_bytes(m, k, in_bytes=1) + 4 * m * -(-k // 128)
        dual_bytes = _act_bytes(m, k) + m * k + 4 * m * -(-k // 128)
        cases.append(("1x128 act (triton)", shape, lambda x: Q.quantize_rows_1xG(x, act), bf16(shape), nbytes))
        cases.append(("1x128 act exact-round", shape, lambda x: T.quantize_rows(x, act, exact_round=True),
                      bf16(shape), nbytes))
        cases.append(("1x128 act (torch ref)", shape, lambda x: Q.quantize_rows_1xG(x, act, backend="reference"),
                      bf16(shape), nbytes))
        if sweep:
            for bm, groups, warps in ROWS_SWEEP:
                config = {"BLOCK_M": bm, "GROUPS": groups, "num_warps": warps}
                name = f"1x128 act bm{bm} g{groups} w{warps}"
                cases.append((name, shape, lambda x, c=config: T.quantize_rows(x, act, config=c), bf16(shape), nbytes))
        cases.append(("128x1 tokens^T", shape, lambda x: Q.quantize_tokens_transposed(x, tok), bf16(shape), nbytes))
        cases.append(("requant fp8 -> tokens^T", shape, lambda q: Q.requantize_tokens_transposed(q),
                      saved(shape), requant_bytes))
        cases.append(("dy 1x128+tokens^T fused", shape,
                      lambda x: Q.quantize_rows_and_tokens_transposed(x, act, tok), bf16(shape), dual_bytes))
        cases.append(("dy 1x128+tokens^T 2 kernels", shape, separate, bf16(shape), dual_bytes))
        if sweep:
            for bc, chunks, warps in TOKENS_SWEEP:
                config = {"BLOCK_C": bc, "CHUNKS": chunks, "num_warps": warps}
                tag = f"c{bc} x{chunks} w{warps}"
                cases.append((f"tokens^T {tag}", shape,
                              lambda x, c=config: T.quantize_tokens_transposed(x, tok, config=c), bf16(shape), nbytes))
            for chunks, warps in DUAL_SWEEP:
                config = {"CHUNKS": chunks, "num_warps": warps}
                cases.append((f"dy fused x{chunks} w{warps}", shape,
                              lambda x, c=config: T.quantize_rows_and_tokens_transposed(x, act, tok, config=c),
                              bf16(shape), dual_bytes))
        cases.append(("per-tensor (2 passes)", shape, lambda x: Q.quantize(x, ten), bf16(shape), 3 * m * k))
    for n, k in WEIGHT_SHAPES:
        nbytes = 3 * n * k + 4 * -(-n // 128) * -(-k // 128)
        cases.append(("128x128 weight", (n, k), lambda w: Q.quantize_blocks(w, blk), bf16((n, k)), nbytes))
    return cases


def run(*, reps: int = 40, warmup: int = 5, sweep: bool = False) -> dict:
    """Measure every case; returns {"meta": ..., "copy_gbps": ..., "rows": [...]} (rows as in the table)."""
    if not torch.cuda.is_available():
        raise RuntimeError("the quantizer benchmark needs a CUDA GPU")
    import triton

    copy_gbps = copy_bandwidth()
    rows = []
    for kernel, shape, fn, make_inputs, nbytes in _cases(sweep):
        sets = rotation(make_inputs, nbytes)
        ms = median(time_cuda(fn, warmup=warmup, reps=reps, inputs_rotation=sets))
        del sets
        rate = gbps(nbytes, ms)
        rows.append({"kernel": kernel, "shape": list(shape), "ms": round(ms, 4), "gbps": round(rate, 1),
                     "pct_copy": round(100 * rate / copy_gbps, 1), "bytes": nbytes})
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "command": " ".join(sys.argv),
        "reps": reps,
    }
    return {"meta": meta, "copy_gbps": round(copy_gbps, 1), "rows": rows}


def format_table(result: dict) -> str:
    lines = [f"{result['meta']['device']}  torch {result['meta']['torch']}  triton {result['meta']['triton']}  "
             f"device copy {result['copy_gbps']:.0f} GB/s (read+write)",
             f"{'kernel':<28} {'shape':>13} {'ms':>8} {'GB/s':>7} {'% copy':>7}"]
    for r in result["rows"]:
        shape = "x".join(str(s) for s in r["shape"])
        lines.append(f"{r['kernel']:<28} {shape:>13} {r['ms']:>8.3f} {r['gbps']:>7.0f} {r['pct_copy']:>6.1f}%")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--sweep", action="store_true", help="also time every launch config of the 1x128, "
                        "tokens-transposed and fused grad-output kernels")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("error: the quantizer benchmark needs a CUDA GPU")
    result = run(reps=args.reps, sweep=args.sweep)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    print(format_table(result))


if __name__ == "__main__":
    main()
