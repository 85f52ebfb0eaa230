"""Probe (fourteenth session): can cuBLASLt's block-scaled FP8 GEMM be batch-invariant when its algorithm is
pinned instead of chosen per call by M?

For each 8B projection shape: every algorithm cuBLASLt's heuristic offers at M = 16 .. 16384, run at M = 8192 on
the same operands; outputs grouped into families of bitwise-equal results; each family's algorithms' speeds;
the fastest algorithm with no split-K run at M = 16 .. 16384 on the leading rows of the same tokens (rows
compared bitwise); torch._scaled_mm (cuBLAS's own choice), the Triton/Gluon batch-invariant kernel and BF16
in the same run. Usage: python3 cublaslt_probe.py OUT.json
"""

from __future__ import annotations

import json
import sys
import time

import torch

from precision_engine.bench.timing import median, rotation, time_cuda
from precision_engine.numerics import cublaslt
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

SHAPES = ((4096, 4096), (1024, 4096), (6144, 4096), (14336, 4096), (28672, 4096), (4096, 14336))
HEURISTIC_M = (16, 64, 256, 2048, 8192, 16384)
INVARIANCE_M = (16, 64, 128, 1008, 4096, 8192, 16384)
ACT, WFMT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]


def lt_call(algo, xq, wq, out):
    return cublaslt.matmul(algo, xq.data, xq.scale, wq.data, wq.scale, True, out)


def time_ms(fn, sets, reps=30):
    return median(time_cuda(fn, warmup=5, reps=reps, inputs_rotation=sets))


def probe_shape(n: int, k: int) -> dict:
    torch.manual_seed(n * 7 + k)
    big = max(INVARIANCE_M)
    x = torch.randn(big, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    wq = quantize_blocks(w, WFMT)
    xq_by_m = {m: quantize_rows_1xG(x[:m].contiguous(), ACT) for m in set(HEURISTIC_M) | set(INVARIANCE_M)}
    m0 = 8192
    xq = xq_by_m[m0]
    found: dict[tuple, cublaslt.Algorithm] = {}
    for m in HEURISTIC_M:
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for algo in cublaslt.algorithms(xq_by_m[m].data, xq_by_m[m].scale, wq.data, wq.scale, True, out):
            found.setdefault(algo.config, algo)
    outputs, families, algos = {}, [], []
    out = torch.empty(m0, n, device="cuda", dtype=torch.bfloat16)
    for config, algo in found.items():
        if not cublaslt.runs(algo, xq.data, xq.scale, wq.data, wq.scale, True, out):
            algos.append({"config": config, "runs": False})
            continue
        y = lt_call(algo, xq, wq, torch.empty_like(out))
        for fid, ref in enumerate(families):
            if torch.equal(y, ref):
                break
        else:
            fid = len(families)
            families.append(y)
        algos.append({"config": config, "runs": True, "family": fid, "algo": algo})
    # Speed of every runnable algorithm at M = 8192, on rotated operands.
    sets = rotation(lambda: (quantize_rows_1xG(torch.randn(m0, k, device="cuda", dtype=torch.bfloat16), ACT),
                             torch.empty(m0, n, device="cuda", dtype=torch.bfloat16)),
                    (m0 * k + 2 * m0 * n), l2_multiple=2)
    for entry in algos:
        if entry["runs"]:
            entry["ms"] = time_ms(lambda q, o, a=entry["algo"]: lt_call(a, q, wq, o), sets)
    xs = [(torch.randn(m0, k, device="cuda", dtype=torch.bfloat16),) for _ in range(len(sets))]
    bf16 = time_ms(lambda xb: torch.mm(xb, w.t()), xs)
    scaled = time_ms(lambda q, o: fp8_gemm(q, wq, kernel=Kernel.CUBLAS, batch_invariant=False), sets)
    triton = time_ms(lambda q, o: fp8_gemm(q, wq, kernel=Kernel.TRITON), sets)
    y_scaled = fp8_gemm(xq, wq, kernel=Kernel.CUBLAS, batch_invariant=False)
    y_triton = fp8_gemm(xq, wq, kernel=Kernel.TRITON)
    y_ref = fp8_gemm(xq, wq, kernel=Kernel.EMULATED).float()
    no_split = [e for e in algos if e["runs"] and e["config"][2] in (0, 1)]
    best = min(no_split, key=lambda e: e["ms"]) if no_split else None
    result = {
        "n": n, "k": k, "m": m0, "algorithms": len(found), "families": len(families), "bf16_ms": bf16,
        "scaled_mm_ms": scaled, "triton_ms": triton,
        "scaled_mm_family": next((i for i, f in enumerate(families) if torch.equal(f, y_scaled)), None),
        "triton_family": next((i for i, f in enumerate(families) if torch.equal(f, y_triton)), None),
        "triton_vs_family0_mismatch": (families[0] != y_triton).float().mean().item() if families else None,
        "family_max_rel_err_vs_emulated": [((f.float() - y_ref).abs().max() / y_ref.abs().max()).item()
                                           for f in families],
        "algos": [{k2: v for k2, v in e.items() if k2 != "algo"} for e in algos],
    }
    if best is not None:
        algo = best["algo"]
        result["best"] = {"config": best["config"], "ms": best["ms"], "family": best["family"],
                          "x_bf16": bf16 / best["ms"]}
        full = lt_call(algo, xq_by_m[big], wq, torch.empty(big, n, device="cuda", dtype=torch.bfloat16))
        same = {}
        for m in INVARIANCE_M:
            o = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            if not cublaslt.runs(algo, xq_by_m[m].data, xq_by_m[m].scale, wq.data, wq.scale, True, o):
                same[m] = "cannot run"
                continue
            same[m] = bool(torch.equal(lt_call(algo, xq_by_m[m], wq, o), full[:m]))
        result["best_invariant"] = same
        # Decode-sized heuristics: does cuBLAS's top pick at M = 16 / 64 fall in the same family, and how fast?
        for m in (16, 64):
            o = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            top = cublaslt.algorithms(xq_by_m[m].data, xq_by_m[m].scale, wq.data, wq.scale, True, o, requested=8)
            picks = []
            for a in top:
                if not cublaslt.runs(a, xq_by_m[m].data, xq_by_m[m].scale, wq.data, wq.scale, True, o):
                    continue
                bits = bool(torch.equal(lt_call(a, xq_by_m[m], wq, o), full[:m]))
                picks.append({"config": a.config, "equal_to_best_rows": bits})
            result[f"decode_{m}"] = picks
    return result


def main() -> None:
    path = sys.argv[1]
    start = time.time()
    ext = cublaslt.extension()
    print(f"extension built/loaded in {time.time() - start:.1f} s: {ext.__file__}", flush=True)
    results = []
    for n, k in SHAPES:
        t0 = time.time()
        r = probe_shape(n, k)
        results.append(r)
        with open(path, "w") as f:
            json.dump(results, f, indent=1, default=str)
        fam_ms = {}
        for e in r["algos"]:
            if e.get("runs"):
                fam_ms.setdefault(e["family"], []).append(round(e["ms"], 4))
        print(f"{n}x{k}: {r['algorithms']} algos, {r['families']} families {fam_ms}; scaled_mm fam "
              f"{r['scaled_mm_family']} triton fam {r['triton_family']} (mismatch vs fam0 "
              f"{r['triton_vs_family0_mismatch']}); rel err {r['family_max_rel_err_vs_emulated']} "
              f"({time.time() - t0:.0f} s)", flush=True)
        if "best" in r:
            b = r["best"]
            print(f"   best no-split {b['config']} fam {b['family']} {b['ms']:.4f} ms = {b['x_bf16']:.2f}x bf16 "
                  f"{r['bf16_ms']:.4f}; scaled_mm {r['bf16_ms'] / r['scaled_mm_ms']:.2f}x, triton "
                  f"{r['bf16_ms'] / r['triton_ms']:.2f}x; invariant {r['best_invariant']}", flush=True)
            for m in (16, 64):
                print(f"   decode M={m}: {r[f'decode_{m}']}", flush=True)


if __name__ == "__main__":
    main()
