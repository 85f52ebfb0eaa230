"""Session 7: the 3-warpgroup (192-row tile) Gluon GEMM vs the shipped kernel; bitwise on 8B and ragged shapes."""
import json, sys, time
import torch
sys.path.insert(0, "exp7")
from precision_engine.bench.timing import median, rotation, time_cuda
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.numerics.gluon_gemm import gluon_block_scaled_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import PREFILL, block_scaled_gemm, segment_kb
import gl_tri

ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
SHAPES = [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (14336, 4096), (1024, 4096)]
MS = [8192, 16384]
VARIANTS = {"tri3r160": dict(stages=3, regs=160), "tri3r152": dict(stages=3, regs=152)}
same = lambda a, b: torch.equal(a.view(torch.uint16), b.view(torch.uint16))


def main(out_path):
    rows, checks = [], []
    for m, n, k in [(200, 1000, 320), (130, 1003, 384), (4097, 6144, 4096), (65, 4096, 4096), (2048, 4096, 14336)]:
        torch.manual_seed(m + n)
        xq = quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT)
        wq = quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02, WEIGHT)
        ref = block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=PREFILL, split=False)
        for name, kw in VARIANTS.items():
            got = gl_tri.tri_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=segment_kb(n, k), **kw)
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
                got = gl_tri.tri_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg, **kw)
                checks.append({"n": n, "k": k, "m": m, "config": name, "bitwise": same(got, ref)})
                timers[name] = (lambda kw: lambda x, w, xq, wq: gl_tri.tri_gemm(
                    xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg, **kw))(kw)
            row = {"n": n, "k": k, "m": m}
            for name, fn in timers.items():
                row[name] = median(time_cuda(fn, warmup=5, reps=30, inputs_rotation=sets))
            rows.append(row)
            print(json.dumps(row), flush=True)
            del sets, x, w, xq, wq, ref
            torch.cuda.empty_cache()
            with open(out_path, "w") as f:
                json.dump({"rows": rows, "checks": checks}, f, indent=1)
    bad = [c for c in checks if not c["bitwise"]]
    print(f"\nchecks: {len(checks)} run, {len(bad)} not bitwise", bad[:8])
    names = ["shipped", *VARIANTS]
    print("| N x K | M | BF16 ms | " + " | ".join(names) + " |")
    for r in rows:
        print(f"| {r['n']}x{r['k']} | {r['m']} | {r['bf16']:.4f} | " + " | ".join(f"{r['bf16']/r[nm]:.2f}" for nm in names) + " |")

if __name__ == "__main__":
    main(sys.argv[1])
