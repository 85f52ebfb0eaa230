"""Probe (fifteenth session, call 3): why a one-chain decode GEMM (no split-K) is slow per K block. Hypothesis: the
per-block scale loads sit on the chain's critical path (an L2 round trip per block). A swapped-operand one-chain
kernel (weight on wgmma's 64-row side, tokens in a 16-wide tile, TMA loads) with the scales of block kb + D
loaded at block kb (D = 0, 1, 2), stages 4/8; bits against pinned cuBLAS; time against BF16 and the split launch.
Usage: python3 chain_decode_probe.py OUT.json
"""

from __future__ import annotations

import json
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from precision_engine.bench.timing import median, rotation, time_cuda
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

ACT, WFMT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
SHAPES = ((4096, 4096), (4096, 14336), (6144, 4096), (14336, 4096), (28672, 4096), (1024, 4096))


@triton.jit
def _scales(sw_ptr, sx_ptr, kb, num_kb, offs_t, mask_t, stride_swk, stride_sxm, stride_sxk):
    kb = tl.minimum(kb, num_kb - 1)  # past the end: a valid block's scales, never used
    sw = tl.load(sw_ptr + kb * stride_swk)
    sx = tl.load(sx_ptr + offs_t * stride_sxm + kb * stride_sxk, mask=mask_t, other=0.0)
    return sw, sx


@triton.jit
def _chain_kernel(w_desc, x_desc, c_ptr, sw_ptr, sx_ptr, M, N, K, stride_cm, stride_swn, stride_swk,
                  stride_sxm, stride_sxk, DIST: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_T: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    off_w = tl.program_id(0) * BLOCK_W
    off_t = tl.program_id(1) * BLOCK_T
    offs_t = off_t + tl.arange(0, BLOCK_T)
    offs_w = off_w + tl.arange(0, BLOCK_W)
    mask_t = offs_t < M
    num_kb = tl.cdiv(K, BLOCK_K)
    sw_row = sw_ptr + (off_w // 128) * stride_swn
    acc = tl.zeros((BLOCK_W, BLOCK_T), dtype=tl.float32)
    if DIST == 0:
        for kb in range(0, num_kb):
            a = w_desc.load([off_w, kb * BLOCK_K])
            b = x_desc.load([off_t, kb * BLOCK_K]).T
            sw, sx = _scales(sw_row, sx_ptr, kb, num_kb, offs_t, mask_t, stride_swk, stride_sxm, stride_sxk)
            acc += tl.dot(a, b) * (sw * sx[None, :])
    elif DIST == 1:
        sw, sx = _scales(sw_row, sx_ptr, 0, num_kb, offs_t, mask_t, stride_swk, stride_sxm, stride_sxk)
        for kb in range(0, num_kb):
            sw1, sx1 = _scales(sw_row, sx_ptr, kb + 1, num_kb, offs_t, mask_t, stride_swk, stride_sxm, stride_sxk)
            a = w_desc.load([off_w, kb * BLOCK_K])
            b = x_desc.load([off_t, kb * BLOCK_K]).T
            acc += tl.dot(a, b) * (sw * sx[None, :])
            sw, sx = sw1, sx1
    else:
        sw, sx = _scales(sw_row, sx_ptr, 0, num_kb, offs_t, mask_t, stride_swk, stride_sxm, stride_sxk)
        sw1, sx1 = _scales(sw_row, sx_ptr, 1, num_kb, offs_t, mask_t, stride_swk, stride_sxm, stride_sxk)
        for kb in range(0, num_kb):
            sw2, sx2 = _scales(sw_row, sx_ptr, kb + 2, num_kb, offs_t, mask_t, stride_swk, stride_sxm, stride_sxk)
            a = w_desc.load([off_w, kb * BLOCK_K])
            b = x_desc.load([off_t, kb * BLOCK_K]).T
            acc += tl.dot(a, b) * (sw * sx[None, :])
            sw, sx, sw1, sx1 = sw1, sx1, sw2, sx2
    mask = (offs_w < N)[:, None] & mask_t[None, :]
    tl.store(c_ptr + offs_t[None, :].to(tl.int64) * stride_cm + offs_w[:, None], acc.to(c_ptr.dtype.element_ty),
             mask=mask)


def chain(xq, wq, dist, stages, block_w=64, block_t=16):
    m, k = xq.data.shape
    n = wq.data.shape[0]
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    w_desc = TensorDescriptor.from_tensor(wq.data, [block_w, 128])
    x_desc = TensorDescriptor.from_tensor(xq.data, [block_t, 128])
    _chain_kernel[(triton.cdiv(n, block_w), triton.cdiv(m, block_t))](
        w_desc, x_desc, c, wq.scale, xq.scale, m, n, k, c.stride(0), *wq.scale.stride(), *xq.scale.stride(),
        DIST=dist, BLOCK_W=block_w, BLOCK_T=block_t, BLOCK_K=128, num_warps=4, num_stages=stages)
    return c


def main() -> None:
    path = sys.argv[1]
    out = []
    for n, k in SHAPES:
        torch.manual_seed(n + k)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        wq0 = quantize_blocks(w, WFMT)
        x0 = torch.randn(64, k, device="cuda", dtype=torch.bfloat16)
        pin = fp8_gemm(quantize_rows_1xG(x0, ACT), wq0, kernel=Kernel.CUBLAS_PINNED)
        cands = {f"d{d}_s{s}": (lambda xq, wq, d=d, s=s: chain(xq, wq, d, s)) for d in (0, 1, 2) for s in (4, 8)}
        cands["d2_s6_w128"] = lambda xq, wq: chain(xq, wq, 2, 6, block_w=128)
        cands["split_default"] = lambda xq, wq: fp8_gemm(xq, wq, kernel=Kernel.TRITON)
        for m in (1, 16, 64):
            xq0 = quantize_rows_1xG(x0[:m].contiguous(), ACT)
            sets = rotation(lambda: (quantize_rows_1xG(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT),
                                     quantize_blocks(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * .02,
                                                     WFMT)), n * k, l2_multiple=2)
            bsets = rotation(lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                                      torch.randn(n, k, device="cuda", dtype=torch.bfloat16)), 2 * n * k, l2_multiple=2)
            t = lambda fn, s=sets: median(time_cuda(fn, warmup=5, reps=40, inputs_rotation=s)) * 1e3  # noqa: E731
            row = {"n": n, "k": k, "m": m, "bf16_us": t(lambda xb, wb: torch.mm(xb, wb.t()), bsets)}
            for name, fn in cands.items():
                try:
                    same = name == "split_default" or torch.equal(fn(xq0, wq0), pin[:m])
                    row[name] = t(fn) if same else "other bits"
                except Exception as err:  # noqa: BLE001
                    row[name] = f"{type(err).__name__}: {str(err)[:200]}"
            out.append(row)
            json.dump(out, open(path, "w"), indent=1)
            print(f"  {n}x{k} M={m}: bf16 {row['bf16_us']:.1f} us; " + ", ".join(
                f"{k2} {row['bf16_us'] / v:.2f}x" for k2, v in row.items() if isinstance(v, float) and k2 != "bf16_us")
                + "; " + ", ".join(f"{k2}: {v}" for k2, v in row.items() if isinstance(v, str)), flush=True)


if __name__ == "__main__":
    main()
