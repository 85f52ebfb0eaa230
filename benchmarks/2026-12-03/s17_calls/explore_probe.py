"""Probe (seventeenth session, call 2): the cuBLASLt configurations beyond the heuristic's offers (lt_explore.cpp),
timed on the step's GEMMs at 8192 tokens; _scaled_mm against our extension on the same algorithm, interleaved;
our Gluon GEMM on the wgrad pair (1x128 x 1x128 scales).
"""

import statistics
import sys
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

from precision_engine.numerics import cublas_pinned
from precision_engine.numerics.gluon_gemm import gluon_block_scaled_gemm

sys.path.insert(0, str(Path(__file__).parent))
from algo_probe import SETS, events_ms, operands  # noqa: E402

M = 8192
ALL_OPTIONS = "--all-options" in sys.argv  # also every CTA swizzle and custom option (call 2 ran without)
PROBLEMS = [((4096, 4096), "fprop"), ((4096, 4096), "wgrad"), ((14336, 4096), "fprop"), ((14336, 4096), "dgrad"),
            ((14336, 4096), "wgrad"), ((4096, 12288), "dgrad"), ((4096, 12288), "wgrad"), ((28672, 4096), "fprop")]


def quick_ms(fn, reps=6):
    fn(0)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(reps):
        start.record()
        fn(i % SETS)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    include, library = cublas_pinned._cublaslt_files()
    ext = load(name="lt_explore", sources=[str(Path(__file__).with_name("lt_explore.cpp"))],
               extra_include_paths=include, extra_ldflags=[library], with_cuda=True, extra_cflags=["-O2"])
    pinned_ext = cublas_pinned.extension()
    ws = torch.empty(cublas_pinned.WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    summary = []
    for (n, k), gemm in PROBLEMS:
        sets = operands(n, k, M, gemm)
        a0, sa0, b0, sb0, blocks, _ = sets[0]
        rows, cols = a0.shape[0], b0.shape[0]
        problem = (cols, a0.shape[1], a0.dtype, b0.dtype, torch.bfloat16, blocks)
        outs = [torch.empty(rows, cols, dtype=torch.bfloat16, device="cuda") for _ in range(SETS)]
        algo = cublas_pinned.pinned_algorithm(sa0, sb0, cols, a0.shape[1], a0.dtype, b0.dtype, torch.bfloat16, blocks)
        pinned = lambda i: pinned_ext.matmul(algo.index, sets[i][0], sets[i][1], sets[i][2], sets[i][3], blocks,  # noqa
                                             outs[i], ws)
        scaled = lambda i: torch._scaled_mm(sets[i][0], sets[i][2].t(), scale_a=sets[i][1], scale_b=sets[i][3],  # noqa
                                            out_dtype=torch.bfloat16)
        bf16 = events_ms(lambda i: torch.mm(*sets[i][5]))
        ab = [(events_ms(scaled), events_ms(pinned)) for _ in range(4)]
        pinned(0)
        reference = outs[0].clone()

        found = ext.explore(sa0, sb0, rows, *problem, cublas_pinned.WORKSPACE_BYTES, ALL_OPTIONS).tolist()
        if len(found) > 500:
            found = [r for r in found if r[3] >= 32]  # stages xAUTO only
        if len(found) > 1500:
            found = [r for r in found if r[2] in (20, 23, 24)]  # tiles 128x128, 128x256, 256x128
        quick = []
        for row in found:
            run = lambda i, idx=row[0]: ext.run(idx, sets[i][0], sets[i][1], sets[i][2], sets[i][3], blocks,  # noqa
                                                outs[i], ws)
            try:
                quick.append((quick_ms(run), row, run))
            except Exception:  # noqa: BLE001
                torch.cuda.synchronize()
        quick.sort(key=lambda q: q[0])
        final = []
        for _, row, run in quick[:8]:
            ms = events_ms(run)
            run(0)
            final.append((ms, row, torch.equal(outs[0], reference)))
        final.sort(key=lambda f: f[0])
        gluon = None
        if gemm == "wgrad":
            from precision_engine.numerics.gemm import transpose_operand  # noqa: F401 (same layouts as algo_probe)
            try:
                kb = -(-a0.shape[1] // 128)
                g = lambda i: gluon_block_scaled_gemm(sets[i][0], sets[i][1], sets[i][2], sets[i][3].t(),  # noqa
                                                      b_scale_rows=1, seg_kb=kb)
                gluon = events_ms(g)
                same = torch.equal(g(0), reference)
            except Exception as err:  # noqa: BLE001
                print(f"  gluon wgrad failed: {type(err).__name__}: {str(err)[:300]}")
                same = None
        print(f"{n}x{k} {gemm}: bf16 {bf16:.4f}; scaled_mm/pinned interleaved "
              + " ".join(f"{s:.4f}/{p:.4f}" for s, p in ab)
              + f"; configs checked {len(found)}, ran {len(quick)}" + (f"; gluon {gluon:.4f} bits==pinned {same}"
                                                                       if gluon else ""))
        for ms, row, eq in final[:5]:
            print(f"    {ms:.4f} ms x{bf16 / ms:.2f} ==pinned {eq} id {row[1]} tile {row[2]} stages {row[3]} "
                  f"cluster {row[4]} swizzle {row[5]} custom {row[6]} ws {row[7]}")
        best = final[0] if final else (float("nan"), None, None)
        summary.append((f"{n}x{k}", gemm, bf16, statistics.median(s for s, _ in ab),
                        statistics.median(p for _, p in ab), best[0], best[2], gluon))
        del sets, outs
        torch.cuda.empty_cache()
    print(f"\n{'shape':>11} {'gemm':>6} {'bf16':>7} {'scaled x':>8} {'pinned x':>8} {'best x':>7} {'best==':>6} "
          f"{'gluon x':>7}")
    for shape, gemm, bf16, s, p, b, eq, g in summary:
        print(f"{shape:>11} {gemm:>6} {bf16:7.4f} {bf16 / s:8.2f} {bf16 / p:8.2f} {bf16 / b:7.2f} {str(eq):>6} "
              f"{(bf16 / g) if g else float('nan'):7.2f}")


if __name__ == "__main__":
    main()
