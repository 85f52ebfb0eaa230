"""Session 7 sweep: serial-schedule Gluon variants vs the shipped Gluon GEMM, bitwise, on the 8B shapes."""
import json, sys, time
import torch
sys.path.insert(0, "exp7")
from precision_engine.bench.timing import median, rotation, time_cuda
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.gluon_gemm import TRAINING, gluon_block_scaled_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import PREFILL, block_scaled_gemm, segment_kb
import gl_var, gl_var2, gl_var3, gl_var4

ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
SHAPES = [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (14336, 4096), (1024, 4096)]
MS = [8192, 16384]
VARIANTS = {
    "a3s4t": dict(stages=4, tma_store=True, mod=gl_var3),
    "a3s6t": dict(stages=6, tma_store=True, mod=gl_var3),
    "p4u2": dict(stages=4, unroll=2, mod=gl_var4),
    "p4u4": dict(stages=4, unroll=4, mod=gl_var4),
    "p4u8": dict(stages=4, unroll=8, mod=gl_var4),
    "p3u4": dict(stages=3, unroll=4, mod=gl_var4),
}
DIAGNOSTIC = set()  # wrong numerics by design: timed, not bit-checked
REPS, WARMUP = 30, 5
same = lambda a, b: torch.equal(a.view(torch.uint16), b.view(torch.uint16))


def main(out_path):
    rows, checks = [], []
    t0 = time.time()
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
            if (n, k) == (4096, 4096):
                tri = block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg, config=PREFILL)
                checks.append({"n": n, "k": k, "m": m, "config": "shipped_vs_triton", "bitwise": same(ref, tri)})
            one = torch.ones((), device="cuda")
            timers = {
                "bf16": lambda x, w, xq, wq: torch.mm(x, w.t()),
                "cublas_fp8": lambda x, w, xq, wq: fp8_gemm(xq, wq, kernel=Kernel.CUBLAS, batch_invariant=False),
                "cublas_fp8_tensorwise": lambda x, w, xq, wq: torch._scaled_mm(xq.data, wq.data.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                "shipped": lambda x, w, xq, wq: gluon_block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg),
            }
            for name, kw in VARIANTS.items():
                try:
                    kw = dict(kw); mod = kw.pop("mod", gl_var)
                    got = mod.serial_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg, **kw)
                    torch.cuda.synchronize()
                except Exception as exc:
                    checks.append({"n": n, "k": k, "m": m, "config": name, "error": repr(exc)[:300]}); continue
                if name not in DIAGNOSTIC:
                    checks.append({"n": n, "k": k, "m": m, "config": name, "bitwise": same(got, ref)})
                timers[name] = (lambda kw, mod: lambda x, w, xq, wq: mod.serial_gemm(
                    xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg, **kw))(kw, mod)
            row = {"n": n, "k": k, "m": m, "segment_kb": seg}
            for name, fn in timers.items():
                try:
                    row[name] = median(time_cuda(fn, warmup=WARMUP, reps=REPS, inputs_rotation=sets))
                except Exception as exc:
                    row[name + "_error"] = repr(exc)[:200]
            rows.append(row)
            print(json.dumps(row), f"t={time.time()-t0:.0f}s", flush=True)
            del sets, x, w, xq, wq, ref
            torch.cuda.empty_cache()
            with open(out_path, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows, "checks": checks}, f, indent=1)
    bad = [c for c in checks if not c.get("bitwise")]
    print(f"\nchecks: {len(checks)} run, {len(bad)} not bitwise or failed")
    for c in bad[:12]: print("  ", c)
    names = ["cublas_fp8", "cublas_fp8_tensorwise", "shipped", *VARIANTS]
    print("\n| N x K | M | BF16 ms | " + " | ".join(names) + " |")
    for r in rows:
        print(f"| {r['n']}x{r['k']} | {r['m']} | {r['bf16']:.4f} | " + " | ".join(f"{r['bf16']/r[nm]:.2f}" if nm in r else "-" for nm in names) + " |")

if __name__ == "__main__":
    main(sys.argv[1])
