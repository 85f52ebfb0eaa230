"""Probe (eighteenth session): DeepGEMM's SM90 FP8 GEMMs beside cuBLAS's block-scaled ones, on a training step's
three GEMMs at the 8B shapes (8192 tokens), with our quantizers' operands.

The seventeenth session measured the step's ceiling on cuBLAS's block-scaled GEMMs at 1.13-1.45x BF16, under
every fwd+bwd target of issue 12, and found no cuBLASLt configuration faster than the heuristic's. DeepGEMM
(1x128 x 128x128 `sm90_fp8_gemm_1d2d` for fprop and dgrad, 1x128 x 1x128 `sm90_fp8_gemm_1d1d` for wgrad, which
on SM90 accumulates into an FP32 D) is the other block-scaled GEMM a user would pick. Questions:
- Is it faster than cuBLAS, per GEMM (round-robin medians, BF16 in the same rounds)?
- Does it give cuBLAS's bits (so the rollout's decode kernels, which give pinned cuBLAS's bits, stay on-policy)?
- Is a row's result independent of M (batch invariance: rows of M = 8192 against M = 1 .. 4096 launches)?
`--warm` only compiles (JIT) every kernel the timed run uses, and can run beside the GPU tests.
"""

import statistics
import sys

import torch

import deep_gemm
from precision_engine.numerics.capabilities import Gemm
from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.formats import Kernel
from precision_engine.numerics.gemm import fp8_gemm, reference_gemm, transpose_operand
from precision_engine.numerics.quantize import (quantize_blocks, quantize_rows_1xG, quantize_tokens_transposed,
                                                requantize_tokens_transposed)

SHAPES = [(4096, 4096), (6144, 4096), (1024, 4096), (4096, 14336), (14336, 4096), (28672, 4096), (12288, 4096),
          (4096, 12288)]
INVARIANCE_SHAPES = [(4096, 4096), (14336, 4096)]
INVARIANCE_M = (1, 8, 64, 200, 1024, 4096)
M = 8192
SETS = 3
ROUNDS = 4
WARM = "--warm" in sys.argv
PART = next((tuple(map(int, a.split("=")[1].split("/"))) for a in sys.argv if a.startswith("--part=")), (0, 1))


def events_ms(fn, reps=15):
    for _ in range(2):
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
    """SETS of (a, b, bf16 pair) for one GEMM of an [m, k] x [n, k]^T linear's step."""
    out = []
    for _ in range(SETS):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        if gemm == "fprop":
            out.append((quantize_rows_1xG(x, P["fp8_group_act"]), quantize_blocks(w, P["fp8_block_weight"]),
                        (x, w.t())))
        elif gemm == "dgrad":
            out.append((quantize_rows_1xG(dy, P["fp8_group_act"]),
                        transpose_operand(quantize_blocks(w, P["fp8_block_weight"])), (dy, w)))
        else:
            out.append((quantize_tokens_transposed(dy, P["fp8_group_tokens"]),
                        requantize_tokens_transposed(quantize_rows_1xG(x, P["fp8_group_act"]),
                                                     P["fp8_group_tokens"]), (dy.t(), x)))
    return out


def dg(a, b, gemm, out):
    """DeepGEMM into `out`: BF16 for the 1d2d kernel; FP32, accumulated (D = C + A B^T, C = D) for 1d1d."""
    if gemm == "wgrad":
        deep_gemm.fp8_gemm_nt((a.data, a.scale), (b.data, b.scale), out, c=out, recipe=(1, 1, 128))
    else:
        deep_gemm.fp8_gemm_nt((a.data, a.scale), (b.data, b.scale), out)
    return out


def dg_out(a, b, gemm):
    dtype = torch.float32 if gemm == "wgrad" else torch.bfloat16
    return torch.zeros(a.data.shape[0], b.data.shape[0], dtype=dtype, device="cuda")


def cublas(a, b, gemm, pinned, out_dtype=torch.bfloat16):
    kernel = Kernel.CUBLAS_PINNED if pinned else Kernel.CUBLAS
    g = {"fprop": Gemm.FPROP, "dgrad": Gemm.DGRAD, "wgrad": Gemm.WGRAD}[gemm]
    return fp8_gemm(a, b, kernel=kernel, gemm=g, out_dtype=out_dtype)


def probe(n, k, gemm):
    sets = operands(n, k, M, gemm)
    outs = [dg_out(a, b, gemm) for a, b, _ in sets]
    if WARM:
        dg(sets[0][0], sets[0][1], gemm, outs[0])
        torch.cuda.synchronize()
        return None
    a0, b0, _ = sets[0]
    # bits: DeepGEMM against cuBLAS (_scaled_mm) and pinned cuBLAS (the batch-invariant bits)
    ref_scaled = cublas(a0, b0, gemm, pinned=False)
    try:
        ref_pinned = cublas(a0, b0, gemm, pinned=True)
    except Exception as err:  # noqa: BLE001
        ref_pinned = None
        print(f"  pinned {gemm}: {type(err).__name__}: {str(err)[:120]}")
    got = dg(a0, b0, gemm, dg_out(a0, b0, gemm))
    got_bf16 = got.to(torch.bfloat16)
    exact = reference_gemm(a0, b0, out_dtype=torch.float64)
    rel = ((got.double() - exact).norm() / exact.norm()).item()
    rel_cublas = ((ref_scaled.double() - exact).norm() / exact.norm()).item()
    same_scaled = torch.equal(got_bf16, ref_scaled)
    differ = (got_bf16 != ref_scaled).float().mean().item()
    same_pinned = None if ref_pinned is None else torch.equal(got_bf16, ref_pinned)
    fp32_same = None
    if gemm == "wgrad":
        fp32_same = torch.equal(got, cublas(a0, b0, gemm, pinned=False, out_dtype=torch.float32))
    del exact
    runs = {
        "bf16": lambda i: torch.mm(*sets[i][2]),
        "cublas": lambda i: cublas(sets[i][0], sets[i][1], gemm, pinned=False),
        "deep_gemm": lambda i: dg(sets[i][0], sets[i][1], gemm, outs[i]),
    }
    if ref_pinned is not None:
        runs["pinned"] = lambda i: cublas(sets[i][0], sets[i][1], gemm, pinned=True)
    if gemm == "wgrad":  # what a BF16 dW costs on DeepGEMM: zero the FP32 D, accumulate, cast
        runs["deep_gemm+zero+cast"] = lambda i: dg(sets[i][0], sets[i][1], gemm, outs[i].zero_()).to(torch.bfloat16)
    times = {name: [] for name in runs}
    for _ in range(ROUNDS):
        for name, fn in runs.items():
            times[name].append(events_ms(fn))
    med = {name: statistics.median(t) for name, t in times.items()}
    mm, nn, kk = (M, n, k) if gemm == "fprop" else (M, k, n) if gemm == "dgrad" else (n, k, M)
    flops = 2 * mm * nn * kk
    row = dict(shape=f"{n}x{k}", gemm=gemm, ms=med, tflops={name: flops / t / 1e9 for name, t in med.items()},
               same_scaled=same_scaled, same_pinned=same_pinned, fp32_same=fp32_same, differ=differ,
               rel=rel, rel_cublas=rel_cublas)
    del sets, outs
    torch.cuda.empty_cache()
    return row


def invariance(n, k):
    """Rows of DeepGEMM's M = 8192 fprop against launches of the first m rows: equal bits for every m?"""
    a, b, _ = operands(n, k, M, "fprop")[0]
    full = dg(a, b, "fprop", dg_out(a, b, "fprop"))
    result = {}
    for m in INVARIANCE_M:
        sub = type(a)(a.data[:m].contiguous(), a.scale[:m].t().contiguous().t(), a.fmt)
        part = dg(sub, b, "fprop", dg_out(sub, b, "fprop"))
        result[m] = None if WARM else torch.equal(part, full[:m])
    torch.cuda.synchronize()
    return result


def main():
    torch.manual_seed(0)
    rows = []
    problems = [(gemm, n, k) for gemm in ("fprop", "dgrad", "wgrad") for n, k in SHAPES]
    for gemm, n, k in problems[PART[0]::PART[1]]:
        try:
            row = probe(n, k, gemm)
        except Exception as err:  # noqa: BLE001
            print(f"{n}x{k} {gemm}: {type(err).__name__}: {str(err)[:300]}", flush=True)
            continue
        if row:
            rows.append(row)
            print(f"{row['shape']:>11} {gemm}: " + " ".join(f"{name} {t:.4f}" for name, t in row["ms"].items())
                  + f" | bits==scaled_mm {row['same_scaled']} (differ {row['differ']:.2e}) ==pinned "
                  f"{row['same_pinned']} fp32== {row['fp32_same']} | rel err dg {row['rel']:.2e} cublas "
                  f"{row['rel_cublas']:.2e}", flush=True)
    for n, k in INVARIANCE_SHAPES[PART[0]::PART[1]]:
        try:
            print(f"invariance {n}x{k} rows of M={M} vs M=m launches:", invariance(n, k), flush=True)
        except Exception as err:  # noqa: BLE001
            print(f"invariance {n}x{k}: {type(err).__name__}: {str(err)[:300]}", flush=True)
    if WARM:
        print("warm done")
        return
    print("\nTFLOP/s (x BF16) per GEMM, 8192 tokens, median of round-robin medians:")
    for r in rows:
        bf = r["ms"]["bf16"]
        cells = " | ".join(f"{name} {r['tflops'][name]:.0f} ({bf / r['ms'][name]:.2f}x)" for name in r["ms"])
        print(f"{r['shape']:>11} {r['gemm']:>5}: {cells}")


if __name__ == "__main__":
    main()
