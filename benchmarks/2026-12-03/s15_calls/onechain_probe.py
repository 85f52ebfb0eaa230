"""Probe (fifteenth session): does the Triton/Gluon kernel with ONE K segment (a single FP32 chain over the K
blocks, seg_kb = ceil(K/128)) give the pinned cuBLAS algorithm's bits? If so, prefill can run cuBLAS and decode
a Triton/Gluon kernel, with one set of bits. Then: how fast is a one-chain decode (no split-K)?

Part A (bits, M = 8192 and decode rows): pinned cuBLAS against Triton one-chain (plain tiles, swapped decode
tiles, mma.sync tiles), Gluon one-chain (training and decode launches), and a hand-written promotion kernel in
three variants (fused multiply-add of d * (sa * sb), unfused, (d * sa) * sb). Also fp32 outputs where cuBLAS
gives them.
Part B (speed, M = 1, 16, 64): GEMM alone on prequantized operands, weights rotated past the L2:
BF16 torch.mm, the shipped split decode, pinned cuBLAS, one-chain Triton/Gluon configs.
Usage: python3 onechain_probe.py OUT.json
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

import torch
import triton
import triton.language as tl

from precision_engine.bench.timing import median, rotation, time_cuda
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import GemmConfig, block_scaled_gemm, PREFILL

SHAPES = ((4096, 4096), (6144, 4096), (14336, 4096), (28672, 4096), (4096, 14336), (1024, 4096))
ACT, WFMT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]


@triton.jit
def _promo_kernel(a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, M, N, K, stride_sam, stride_sak, stride_sbn, stride_sbk,
                  PROMO: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mm = offs_m < M
    mn = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptr + offs_m[:, None] * K + kb * BLOCK_K + offs_k[None, :], mask=mm[:, None], other=0.0)
        b = tl.load(b_ptr + offs_n[None, :] * K + kb * BLOCK_K + offs_k[:, None], mask=mn[None, :], other=0.0)
        sa = tl.load(sa_ptr + offs_m * stride_sam + kb * stride_sak, mask=mm, other=0.0)
        sb = tl.load(sb_ptr + (offs_n // 128) * stride_sbn + kb * stride_sbk, mask=mn, other=0.0)
        d = tl.dot(a, b)
        if PROMO == 2:
            acc += (d * sa[:, None]) * sb[None, :]
        elif PROMO == 3:
            acc += (d * sb[None, :]) * sa[:, None]
        else:
            acc += d * (sa[:, None] * sb[None, :])
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=mm[:, None] & mn[None, :])


def promo(xq, wq, variant: int, out_dtype):
    m, k = xq.data.shape
    n = wq.data.shape[0]
    c = torch.empty(m, n, device=xq.data.device, dtype=out_dtype)
    fuse = variant != 1
    _promo_kernel[(triton.cdiv(m, 64), triton.cdiv(n, 128))](
        xq.data, wq.data, c, xq.scale, wq.scale, m, n, k, *xq.scale.stride(), *wq.scale.stride(),
        PROMO=variant, BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, num_warps=4, num_stages=3, enable_fp_fusion=fuse)
    return c


def mismatch(y, ref) -> float:
    return (y.view(torch.int16 if y.dtype == torch.bfloat16 else torch.int32)
            != ref.view(torch.int16 if ref.dtype == torch.bfloat16 else torch.int32)).float().mean().item()


def triton_one(xq, wq, config, out_dtype=torch.bfloat16):
    nkb = triton.cdiv(xq.data.shape[1], 128)
    return block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, out_dtype=out_dtype,
                             config=config, seg_kb=nkb, split=False)


def gluon_one(xq, wq, out_dtype=torch.bfloat16):
    from precision_engine.numerics.gluon_gemm import gluon_block_scaled_gemm
    nkb = triton.cdiv(xq.data.shape[1], 128)
    return gluon_block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=nkb,
                                   out_dtype=out_dtype)


def gluon_dec(xq, wq, block_n=128, stages=4, unroll=2, per_sm=1, out_dtype=torch.bfloat16):
    from precision_engine.numerics.gluon_gemm import DECODE, gluon_decode_gemm
    nkb = triton.cdiv(xq.data.shape[1], 128)
    cfg = replace(DECODE, whole=True, block_n=block_n, stages=stages, unroll=unroll, per_sm=per_sm)
    return gluon_decode_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=nkb,
                             out_dtype=out_dtype, config=cfg)


SWAP = {s: GemmConfig(block_m=64, block_n=16, num_warps=4, num_stages=s, group_m=1, swap_ab=True) for s in (4, 6, 8)}
SWAP128 = GemmConfig(block_m=128, block_n=16, num_warps=4, num_stages=4, group_m=1, swap_ab=True)
MMA_SYNC = GemmConfig(block_m=16, block_n=64, num_warps=4, num_stages=4, group_m=1, tma=False)
DEC64 = GemmConfig(block_m=64, block_n=64, num_warps=4, num_stages=4, group_m=1, tma=False)
DEC64_SWAP = GemmConfig(block_m=64, block_n=64, num_warps=4, num_stages=6, group_m=1, swap_ab=True)


def bits(n: int, k: int) -> dict:
    torch.manual_seed(n + 3 * k)
    m = 8192
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    xq, wq = quantize_rows_1xG(x, ACT), quantize_blocks(w, WFMT)
    pin = fp8_gemm(xq, wq, kernel=Kernel.CUBLAS_PINNED)
    r = {"n": n, "k": k}
    r["default_triton"] = mismatch(fp8_gemm(xq, wq, kernel=Kernel.TRITON), pin)
    r["triton_one_prefill"] = mismatch(triton_one(xq, wq, PREFILL), pin)
    for name, fn in (("gluon_one", lambda: gluon_one(xq, wq)),) + tuple(
            (f"promo{v}", lambda v=v: promo(xq, wq, v, torch.bfloat16)) for v in (0, 1, 2, 3)):
        try:
            r[name] = mismatch(fn(), pin)
        except Exception as err:  # noqa: BLE001
            r[name] = f"{type(err).__name__}: {str(err)[:200]}"
    # decode rows: pinned rows at M = 1, 16, 64 are the M = 8192 rows (s14); compare the decode kernels' rows
    for rows in (1, 16, 64):
        xs = quantize_rows_1xG(x[:rows].contiguous(), ACT)
        for name, fn in (("swap64", lambda: triton_one(xs, wq, SWAP[6])), ("swap128", lambda: triton_one(xs, wq, SWAP128)),
                         ("mma_sync", lambda: triton_one(xs, wq, MMA_SYNC)), ("dec64", lambda: triton_one(xs, wq, DEC64)),
                         ("gluon_dec128", lambda: gluon_dec(xs, wq)), ("gluon_dec64", lambda: gluon_dec(xs, wq, block_n=64))):
            try:
                r[f"{name}@{rows}"] = mismatch(fn(), pin[:rows])
            except Exception as err:  # noqa: BLE001
                r[f"{name}@{rows}"] = f"{type(err).__name__}: {str(err)[:200]}"
    # fp32 outputs: the chain's bits before the BF16 rounding
    try:
        pin32 = fp8_gemm(xq, wq, kernel=Kernel.CUBLAS_PINNED, out_dtype=torch.float32)
        r["fp32_triton_one"] = mismatch(triton_one(xq, wq, PREFILL, torch.float32), pin32)
        r["fp32_promo0"] = mismatch(promo(xq, wq, 0, torch.float32), pin32)
        r["fp32_promo1"] = mismatch(promo(xq, wq, 1, torch.float32), pin32)
        r["fp32_default_triton"] = mismatch(fp8_gemm(xq, wq, kernel=Kernel.TRITON, out_dtype=torch.float32), pin32)
    except Exception as err:  # noqa: BLE001
        r["fp32"] = f"{type(err).__name__}: {str(err)[:300]}"
    return r


def speed(n: int, k: int) -> list[dict]:
    rows_out = []
    for m in (1, 16, 64):
        torch.manual_seed(m)
        sets = rotation(lambda: (quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT),
                                 quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * .02, WFMT)),
                        n * k, l2_multiple=2)
        bsets = rotation(lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                                  torch.randn(n, k, device="cuda", dtype=torch.bfloat16)), 2 * n * k, l2_multiple=2)
        t = lambda fn, s=sets: median(time_cuda(fn, warmup=5, reps=40, inputs_rotation=s)) * 1e3  # noqa: E731
        row = {"n": n, "k": k, "m": m, "bf16_us": t(lambda xb, wb: torch.mm(xb, wb.t()), bsets)}
        cands = {
            "split_default": lambda xq, wq: fp8_gemm(xq, wq, kernel=Kernel.TRITON),
            "pinned": lambda xq, wq: fp8_gemm(xq, wq, kernel=Kernel.CUBLAS_PINNED),
            "swap64_s4": lambda xq, wq: triton_one(xq, wq, SWAP[4]),
            "swap64_s6": lambda xq, wq: triton_one(xq, wq, SWAP[6]),
            "swap64_s8": lambda xq, wq: triton_one(xq, wq, SWAP[8]),
            "swap128": lambda xq, wq: triton_one(xq, wq, SWAP128),
            "dec64": lambda xq, wq: triton_one(xq, wq, DEC64),
            "dec64_swap": lambda xq, wq: triton_one(xq, wq, DEC64_SWAP),
            "gluon_dec128": lambda xq, wq: gluon_dec(xq, wq),
            "gluon_dec64": lambda xq, wq: gluon_dec(xq, wq, block_n=64),
            "gluon_dec64_s8": lambda xq, wq: gluon_dec(xq, wq, block_n=64, stages=8),
            "gluon_dec64_u4": lambda xq, wq: gluon_dec(xq, wq, block_n=64, stages=8, unroll=4),
        }
        for name, fn in cands.items():
            try:
                row[name] = t(fn)
            except Exception as err:  # noqa: BLE001
                row[name] = f"{type(err).__name__}: {str(err)[:160]}"
        rows_out.append(row)
        best = {k2: v for k2, v in row.items() if isinstance(v, float) and k2 != "bf16_us"}
        print(f"  {n}x{k} M={m}: bf16 {row['bf16_us']:.1f} us; " + ", ".join(
            f"{k2} {row['bf16_us'] / v:.2f}x" for k2, v in best.items())
            + "; " + ", ".join(f"{k2}: {v}" for k2, v in row.items() if isinstance(v, str)), flush=True)
    return rows_out


NARROW = {f"t_n{bn}_s{st}": GemmConfig(block_m=64, block_n=bn, num_warps=4, num_stages=st, group_m=1)
          for bn in (16, 32) for st in (6, 10)}


def narrow(n: int, k: int) -> list[dict]:
    """Call 2: one-chain decode with narrow weight tiles (tokens on wgmma's 64-row side): more programs, each
    streaming fewer bytes per K block; their bits against pinned cuBLAS at M = 1, 16, 64."""
    rows_out = []
    torch.manual_seed(n - k)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    wq0 = quantize_blocks(w, WFMT)
    x0 = torch.randn(64, k, device="cuda", dtype=torch.bfloat16)
    pin = fp8_gemm(quantize_rows_1xG(x0, ACT), wq0, kernel=Kernel.CUBLAS_PINNED)
    cands = {name: (lambda xq, wq, c=cfg: triton_one(xq, wq, c)) for name, cfg in NARROW.items()}
    for bn in (16, 32):
        for per_sm in (1, 2):
            cands[f"g_n{bn}_p{per_sm}"] = lambda xq, wq, bn=bn, p=per_sm: gluon_dec(xq, wq, block_n=bn, stages=8,
                                                                                     per_sm=p)
    cands["swap64_s8"] = lambda xq, wq: triton_one(xq, wq, SWAP[8])
    cands["split_default"] = lambda xq, wq: fp8_gemm(xq, wq, kernel=Kernel.TRITON)
    for m in (1, 16, 64):
        xq0 = quantize_rows_1xG(x0[:m].contiguous(), ACT)
        sets = rotation(lambda: (quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT),
                                 quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * .02, WFMT)),
                        n * k, l2_multiple=2)
        bsets = rotation(lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                                  torch.randn(n, k, device="cuda", dtype=torch.bfloat16)), 2 * n * k, l2_multiple=2)
        t = lambda fn, s=sets: median(time_cuda(fn, warmup=5, reps=40, inputs_rotation=s)) * 1e3  # noqa: E731
        row = {"n": n, "k": k, "m": m, "bf16_us": t(lambda xb, wb: torch.mm(xb, wb.t()), bsets)}
        for name, fn in cands.items():
            try:
                same = name == "split_default" or mismatch(fn(xq0, wq0), pin[:m]) == 0.0
                row[name] = t(fn) if same else "other bits"
            except Exception as err:  # noqa: BLE001
                row[name] = f"{type(err).__name__}: {str(err)[:160]}"
        rows_out.append(row)
        print(f"  {n}x{k} M={m}: bf16 {row['bf16_us']:.1f} us; " + ", ".join(
            f"{k2} {row['bf16_us'] / v:.2f}x" for k2, v in row.items() if isinstance(v, float) and k2 != "bf16_us")
            + "; " + ", ".join(f"{k2}: {v}" for k2, v in row.items() if isinstance(v, str)), flush=True)
    return rows_out


def main() -> None:
    path = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] == "narrow":
        out = []
        for n, k in ((4096, 4096), (4096, 14336), (6144, 4096), (1024, 4096), (14336, 4096)):
            out += narrow(n, k)
            json.dump(out, open(path, "w"), indent=1)
        return
    t0 = time.time()
    out = {"bits": [], "speed": []}
    for n, k in SHAPES:
        r = bits(n, k)
        out["bits"].append(r)
        print(f"bits {n}x{k}: " + ", ".join(f"{k2}={v if isinstance(v, str) else f'{v:.2e}'}"
                                             for k2, v in r.items() if k2 not in ('n', 'k')), flush=True)
        json.dump(out, open(path, "w"), indent=1)
    print(f"bits done in {time.time() - t0:.0f} s", flush=True)
    for n, k in SHAPES:
        out["speed"] += speed(n, k)
        json.dump(out, open(path, "w"), indent=1)
    print(f"all done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
