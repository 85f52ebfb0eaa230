"""Session 10: the split-N Gluon GEMM (each warpgroup's block product as two 64x64 wgmmas, one promoted while
the other runs) vs the shipped kernel and BF16 torch.mm, same run; every output bitwise against the shipped one."""
import json, sys
import torch
sys.path.insert(0, "exp10")
from precision_engine.bench.timing import median, rotation, time_cuda
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.numerics.gluon_gemm import gluon_block_scaled_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import PREFILL, block_scaled_gemm, segment_kb
import gl_split

ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
SHAPES = [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (14336, 4096), (1024, 4096)]
MS = [8192, 16384]
import os
VARIANTS = {"split": dict(), "split_g16": dict(group_m=16), "split_s5": dict(stages=5)}
if os.environ.get("CONFIRM"):
    VARIANTS = {"split": dict(), "split_b": dict()}
if os.environ.get("TS"):
    VARIANTS = {"split": dict(), "split_ts": dict(total_smem=True), "split_s5": dict(stages=5)}  # the same kernel twice: run-to-run spread in one row
same = lambda a, b: torch.equal(a.view(torch.uint16), b.view(torch.uint16))


def main(out_path):
    rows, checks = [], []
    for m, n, k in [(200, 1000, 512), (130, 1000, 1024), (4097, 6144, 4096), (65, 4096, 4096), (2048, 4096, 14336)]:
        torch.manual_seed(m + n)
        xq = quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT)
        wq = quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02, WEIGHT)
        ref = block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=PREFILL, split=False)
        for name, kw in VARIANTS.items():
            try:
                got = gl_split.split_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128,
                                          seg_kb=segment_kb(n, k), **kw)
            except AssertionError:
                continue
            checks.append({"m": m, "n": n, "k": k, "config": name, "bitwise": same(got, ref)})
    print("ragged checks", checks, flush=True)
    for n, k in SHAPES:
        seg = segment_kb(n, k)
        for m in MS:
            def make():
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
                return x, w, quantize_rows_1xG(x, ACT), quantize_blocks(w, WEIGHT)
            sets = rotation(make, m * k * 3 + n * k * 3, l2_multiple=2.0, max_sets=3)
            x, w, xq, wq = sets[0]
            ref = gluon_block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg)
            timers = {"bf16": lambda x, w, xq, wq: torch.mm(x, w.t()),
                      "shipped": lambda x, w, xq, wq: gluon_block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale,
                                                                              b_scale_rows=128, seg_kb=seg)}
            for name, kw in VARIANTS.items():
                got = gl_split.split_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg, **kw)
                checks.append({"n": n, "k": k, "m": m, "config": name, "bitwise": same(got, ref)})
                timers[name] = (lambda kw: lambda x, w, xq, wq: gl_split.split_gemm(
                    xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg, **kw))(kw)
            if os.environ.get("CONFIRM"):
                timers["shipped_b"] = timers["shipped"]
            row = {"n": n, "k": k, "m": m}
            for name, fn in timers.items():
                row[name] = median(time_cuda(fn, warmup=5, reps=int(os.environ.get("REPS", 30)), inputs_rotation=sets))
            rows.append(row)
            print(json.dumps(row), flush=True)
            del sets, x, w, xq, wq, ref
            torch.cuda.empty_cache()
            with open(out_path, "w") as f:
                json.dump({"rows": rows, "checks": checks}, f, indent=1)
    bad = [c for c in checks if not c["bitwise"]]
    print(f"\nchecks: {len(checks)} run, {len(bad)} not bitwise", bad[:8])
    names = ["shipped", *VARIANTS] + (["shipped_b"] if os.environ.get("CONFIRM") else [])
    print("| N x K | M | BF16 ms | " + " | ".join(names) + " |")
    for r in rows:
        print(f"| {r['n']}x{r['k']} | {r['m']} | {r['bf16']:.4f} | " + " | ".join(f"{r['bf16']/r[nm]:.2f}" for nm in names) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
