"""Does SGLang's DeepGEMM wheel (sgl-deep-gemm 0.2.5) run here, how fast against cuBLAS / our kernels / BF16,
and is it batch-invariant? fprop & dgrad: 1x128 x 128x128 (recipe (1,128,128)); wgrad: 1x128 x 1x128 along tokens."""
import os, sys, time, traceback, statistics
import torch
os.environ.setdefault("DG_JIT_CACHE_DIR", "/tmp/dgcache")
try:
    import deep_gemm
    print("deep_gemm imported", getattr(deep_gemm, "__version__", "?"), "num_sms", deep_gemm.get_num_sms())
except Exception:
    traceback.print_exc(); sys.exit(1)
from precision_engine.numerics.formats import PRESET_FORMATS as P, Kernel
from precision_engine.numerics.quantize import quantize_rows_1xG, quantize_blocks, quantize_tokens_transposed
from precision_engine.numerics.gemm import fp8_gemm, transpose_operand, reference_gemm
from precision_engine.numerics.capabilities import Gemm

def bench(fn, reps=30):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)

def dg_nt(a, b, out, recipe=None):
    deep_gemm.fp8_gemm_nt((a.data, a.scale), (b.data, b.scale), out, recipe=recipe)
    return out

torch.manual_seed(0)
act, wfmt, tok = P["fp8_group_act"], P["fp8_block_weight"], P["fp8_group_tokens"]
rows = []
for n, k in ((4096, 4096), (1024, 4096), (6144, 4096), (14336, 4096), (28672, 4096), (4096, 14336)):
    for m in (8192, 16384):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        xq, wq = quantize_rows_1xG(x, act), quantize_blocks(w, wfmt)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        r = {"n": n, "k": k, "m": m}
        r["bf16"] = bench(lambda: x @ w.t())
        r["cublas"] = bench(lambda: fp8_gemm(xq, wq, kernel=Kernel.CUBLAS, batch_invariant=False))
        r["gluon"] = bench(lambda: fp8_gemm(xq, wq, kernel=Kernel.TRITON))
        try:
            ref = fp8_gemm(xq, wq, kernel=Kernel.CUBLAS, batch_invariant=False).float()
            got = dg_nt(xq, wq, out).float()
            r["fprop_relerr"] = float((got - ref).norm() / ref.norm())
            r["dg"] = bench(lambda: dg_nt(xq, wq, out))
            if m == 8192 and n == 4096 and k == 4096:
                full = dg_nt(xq, wq, torch.empty(m, n, device="cuda", dtype=torch.bfloat16)).clone()
                inv = {}
                for mm in (1, 7, 64, 100, 1000, 4096):
                    sub = type(xq)(xq.data[:mm].contiguous(), xq.scale[:mm].contiguous(), xq.fmt)
                    o = dg_nt(sub, wq, torch.empty(mm, n, device="cuda", dtype=torch.bfloat16))
                    inv[mm] = bool(torch.equal(o, full[:mm]))
                r["dg_invariant"] = inv
                gl = fp8_gemm(xq, wq, kernel=Kernel.TRITON)
                r["dg_eq_gluon"] = bool(torch.equal(gl, full))
        except Exception as e:
            r["dg_err"] = f"{type(e).__name__}: {str(e)[:300]}"
        # dgrad: dy [m, n] 1x128 @ W (wt = Q(W)^T [k, n] blocks)
        try:
            dyq, wt = quantize_rows_1xG(dy, act), transpose_operand(wq)
            outd = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
            r["bf16_dgrad"] = bench(lambda: dy @ w)
            r["cublas_dgrad"] = bench(lambda: fp8_gemm(dyq, wt, kernel=Kernel.CUBLAS, gemm=Gemm.DGRAD))
            r["dg_dgrad"] = bench(lambda: dg_nt(dyq, wt, outd))
        except Exception as e:
            r["dgrad_err"] = f"{type(e).__name__}: {str(e)[:300]}"
        # wgrad: dyT [n, m] x xT [k, m], both 1x128 along tokens
        try:
            dyt, xt = quantize_tokens_transposed(dy, tok), quantize_tokens_transposed(x, tok)
            r["bf16_wgrad"] = bench(lambda: dy.t() @ x)
            r["cublas_wgrad"] = bench(lambda: fp8_gemm(dyt, xt, kernel=Kernel.CUBLAS, gemm=Gemm.WGRAD))
            ref = fp8_gemm(dyt, xt, kernel=Kernel.CUBLAS, gemm=Gemm.WGRAD).float()
            for odt in (torch.bfloat16, torch.float32):
                outw = torch.empty(n, k, device="cuda", dtype=odt)
                try:
                    got = dg_nt(dyt, xt, outw, recipe=(1, 1, 128)).float()
                    r[f"wgrad_relerr_{odt}"] = float((got - ref).norm() / ref.norm())
                    r[f"dg_wgrad_{str(odt)[6:]}"] = bench(lambda: dg_nt(dyt, xt, outw, recipe=(1, 1, 128)))
                except Exception as e:
                    r[f"wgrad_err_{str(odt)[6:]}"] = f"{type(e).__name__}: {str(e)[:200]}"
        except Exception as e:
            r["wgrad_err"] = f"{type(e).__name__}: {str(e)[:300]}"
        print({kk: (round(v, 4) if isinstance(v, float) else v) for kk, v in r.items()}, flush=True)
        rows.append(r)
        del x, w, dy, xq, wq, out
        torch.cuda.empty_cache()

print("\nshape       M     bf16  cuBLASx gluonx  DGx | dgrad cuBLASx DGx | wgrad cuBLASx DGx(bf16) DGx(fp32)")
for r in rows:
    f = lambda key, base: f"{r[base]/r[key]:6.2f}" if key in r else "   -  "
    print(f"{r['n']:>5}x{r['k']:<5} {r['m']:>6} {r['bf16']:7.3f} {f('cublas','bf16')} {f('gluon','bf16')} {f('dg','bf16')} |"
          f" {f('cublas_dgrad','bf16_dgrad')} {f('dg_dgrad','bf16_dgrad')} | {f('cublas_wgrad','bf16_wgrad')} "
          f"{f('dg_wgrad_bfloat16','bf16_wgrad')} {f('dg_wgrad_float32','bf16_wgrad')}")
