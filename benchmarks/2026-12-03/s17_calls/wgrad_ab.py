"""Probe (seventeenth session, call 3): the wgrad GEMM's offered cuBLASLt algorithms timed round-robin (each
candidate once per round, six rounds), so the clock's drift during a run (call 2: the same algorithm 1.13 ms early
in a run, 1.00 late) falls on every candidate alike. Call 1 timed them one after another and found tile 64x256
3-13% ahead of the heuristic's first pick on four shapes.
"""

import statistics
import sys
from pathlib import Path

import torch

from precision_engine.numerics import cublas_pinned

sys.path.insert(0, str(Path(__file__).parent))
from algo_probe import SETS, events_ms, operands  # noqa: E402

SHAPES = [(4096, 4096), (4096, 14336), (14336, 4096), (4096, 12288), (12288, 4096), (28672, 4096)]
ROUNDS = 6


def main():
    ext = cublas_pinned.extension()
    ws = torch.empty(cublas_pinned.WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    for n, k in SHAPES:
        sets = operands(n, k, 8192, "wgrad")
        a0, sa0, b0, sb0, blocks, _ = sets[0]
        rows, cols = a0.shape[0], b0.shape[0]
        problem = (cols, a0.shape[1], a0.dtype, b0.dtype, torch.bfloat16, blocks)
        offered = [r for r in ext.algorithms(sa0, sb0, rows, *problem, 16, cublas_pinned.WORKSPACE_BYTES).tolist()
                   if r[3] <= 1 and r[4] == 0]
        outs = [torch.empty(rows, cols, dtype=torch.bfloat16, device="cuda") for _ in range(SETS)]
        runs = {}
        for r in offered:
            if 0 <= ext.workspace_needed(r[0], sa0, sb0, rows, *problem) <= cublas_pinned.WORKSPACE_BYTES:
                runs[f"tile{r[2]}/c{r[6]}/cl{r[9]}"] = (lambda i, idx=r[0]: ext.matmul(
                    idx, sets[i][0], sets[i][1], sets[i][2], sets[i][3], blocks, outs[i], ws))
        runs["_scaled_mm"] = lambda i: torch._scaled_mm(sets[i][0], sets[i][2].t(), scale_a=sets[i][1],
                                                        scale_b=sets[i][3], out_dtype=torch.bfloat16)
        times = {name: [] for name in runs}
        for _ in range(ROUNDS):
            for name, fn in runs.items():
                times[name].append(events_ms(fn, reps=15))
        bits = {}
        for name, fn in runs.items():
            bits[name] = fn(0) if name == "_scaled_mm" else (fn(0), outs[0].clone())[1]
        ref = bits["_scaled_mm"]
        med = {name: statistics.median(t) for name, t in times.items()}
        first = next(iter(runs))
        print(f"{n}x{k} wgrad, median of {ROUNDS} round-robin medians (ms); heuristic's first {first}:")
        for name in sorted(med, key=med.get):
            print(f"    {name:>22} {med[name]:.4f}  x{med[first] / med[name]:.3f} vs first  spread "
                  f"{min(times[name]):.4f}-{max(times[name]):.4f}  bits==_scaled_mm {torch.equal(bits[name], ref)}")
        del sets, outs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
