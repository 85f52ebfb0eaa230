"""Probe (seventeenth session): every cuBLASLt algorithm the heuristic offers for the three block-scaled GEMMs of a
training step, timed on the 8B shapes at 8192 tokens, beside torch._scaled_mm (its first pick) and BF16.

Question: is the heuristic's first pick the fastest? The wgrad GEMM (1x128 x 1x128 scales) ran 0.894 ms against
fprop's 0.704 on 14336x4096 (tenth session's profile): the largest single cost between the FP8 step and 1.6x BF16.
Each candidate's output is compared bitwise with the pinned algorithm's (first no-split offer) and _scaled_mm's.
"""

import statistics
import sys

import torch

from precision_engine.numerics import cublas_pinned
from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.gemm import _cublas_operands, transpose_operand
from precision_engine.numerics.quantize import (quantize_blocks, quantize_rows_1xG, quantize_tokens_transposed,
                                                requantize_tokens_transposed)

SHAPES = [(4096, 4096), (6144, 4096), (1024, 4096), (4096, 14336), (14336, 4096), (28672, 4096), (12288, 4096),
          (4096, 12288)]
M = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
REQUESTED = 64
SETS = 3


def events_ms(fn, reps=25):
    for _ in range(3):
        fn(0)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda.synchronize()
    for i in range(reps):
        torch.cuda._sleep(200_000)
        starts[i].record()
        fn(i % SETS)
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def operands(n, k, m, gemm):
    """SETS operand tuples (a_data, a_scale, b_data, scale_b, w_blocks) laid out as gemm._cublas_gemm does."""
    out = []
    for _ in range(SETS):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        if gemm == "fprop":
            a, b, rows = quantize_rows_1xG(x, P["fp8_group_act"]), quantize_blocks(w, P["fp8_block_weight"]), 128
            bf = (x, w.t())
        elif gemm == "dgrad":
            a, b, rows = quantize_rows_1xG(dy, P["fp8_group_act"]), transpose_operand(
                quantize_blocks(w, P["fp8_block_weight"])), 128
            bf = (dy, w)
        else:
            a = quantize_tokens_transposed(dy, P["fp8_group_tokens"])
            b = requantize_tokens_transposed(quantize_rows_1xG(x, P["fp8_group_act"]), P["fp8_group_tokens"])
            rows = 1
            bf = (dy.t(), x)
        out.append((*_cublas_operands(a, b, rows), rows == 128, bf))
    return out


def probe(n, k, m, gemm):
    ext = cublas_pinned.extension()
    sets = operands(n, k, m, gemm)
    a0, sa0, b0, sb0, blocks, _ = sets[0]
    rows_, cols_, red = a0.shape[0], b0.shape[0], a0.shape[1]
    problem = (cols_, red, a0.dtype, b0.dtype, torch.bfloat16, blocks)
    offered = ext.algorithms(sa0, sb0, rows_, *problem, REQUESTED, cublas_pinned.WORKSPACE_BYTES).tolist()
    ws = torch.empty(cublas_pinned.WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    outs = [torch.empty(rows_, cols_, dtype=torch.bfloat16, device="cuda") for _ in range(SETS)]

    bf16 = events_ms(lambda i: torch.mm(*sets[i][5]))
    scaled = events_ms(lambda i: torch._scaled_mm(sets[i][0], sets[i][2].t(), scale_a=sets[i][1],
                                                  scale_b=sets[i][3], out_dtype=torch.bfloat16))
    ref = torch._scaled_mm(a0, b0.t(), scale_a=sa0, scale_b=sb0, out_dtype=torch.bfloat16)
    results = []
    pinned_out = None
    for row in offered:
        index = row[0]
        need = ext.workspace_needed(index, sa0, sb0, rows_, *problem)
        if not 0 <= need <= cublas_pinned.WORKSPACE_BYTES:
            continue
        run = lambda i: ext.matmul(index, sets[i][0], sets[i][1], sets[i][2], sets[i][3], blocks, outs[i], ws)  # noqa
        try:
            ms = events_ms(run)
        except Exception as err:  # noqa: BLE001
            print(f"  algo {index} failed: {err}"[:160])
            continue
        run(0)
        got = outs[0].clone()
        splits = row[3] > 1 or row[4] != 0
        if pinned_out is None and not splits:
            pinned_out = got
        results.append((ms, row, splits, torch.equal(got, ref), got))
    pinned = next((r for r in results if not r[2]), None)
    best = min(results, key=lambda r: r[0])
    best_ns = min((r for r in results if not r[2]), key=lambda r: r[0])
    same_ns = all(torch.equal(r[4], pinned_out) for r in results if not r[2])
    print(f"{n}x{k} M={m} {gemm}: offered {len(offered)} ran {len(results)}; bf16 {bf16:.4f} scaled_mm {scaled:.4f}"
          f" first {results[0][0]:.4f} pinned {pinned[0]:.4f} best {best[0]:.4f} (split {best[2]}, ==scaled_mm "
          f"{best[3]}, cfg {best[1][1:10]}) best-no-split {best_ns[0]:.4f} cfg {best_ns[1][1:10]}; "
          f"no-split all same bits {same_ns}")
    for ms, row, splits, eq, _ in sorted(results, key=lambda r: r[0])[:6]:
        print(f"    {ms:.4f} ms split={splits} ==scaled_mm={eq} cfg={row[1:10]} ws={row[10]}")
    return dict(shape=f"{n}x{k}", gemm=gemm, bf16=bf16, scaled=scaled, pinned=pinned[0], best=best[0],
                best_ns=best_ns[0])


if __name__ == "__main__":
    table = []
    for n, k in SHAPES:
        for gemm in ("fprop", "dgrad", "wgrad"):
            table.append(probe(n, k, M, gemm))
            torch.cuda.empty_cache()
    print(f"\n{'shape':>12} {'gemm':>6} {'bf16':>7} {'_scaled_mm x':>12} {'pinned x':>9} {'best x':>7} "
          f"{'best no-split x':>15}")
    for r in table:
        print(f"{r['shape']:>12} {r['gemm']:>6} {r['bf16']:7.4f} {r['bf16'] / r['scaled']:12.2f} "
              f"{r['bf16'] / r['pinned']:9.2f} {r['bf16'] / r['best']:7.2f} {r['bf16'] / r['best_ns']:15.2f}")
