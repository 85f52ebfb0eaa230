"""Probe (fifteenth session, call 4): a one-chain decode GEMM with split-K parallelism, the "relay". The chain
acc = fma(P_kb, sa*sb, acc) over K blocks is the pinned cuBLAS kernel's (call 1). Only its FMAs are ordered; the
block products P_kb are independent. So K is cut into S segments, one program each: segment 0 runs its chain;
segment s > 0 computes its P_kb into a stash (global, L2), waits for segment s - 1's running sum (a flag per
tile), then adds its P_kb in order and hands on. Programs take units by ticket, so a waited-for segment always
runs already. Bits against pinned cuBLAS; time against BF16 and the shipped split launch.
Usage: python3 relay_probe.py OUT.json
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
SHAPES = ((4096, 4096), (4096, 14336), (6144, 4096), (1024, 4096), (14336, 4096), (28672, 4096))


@triton.jit
def _relay_kernel(w_desc, x_desc, c_ptr, stash_ptr, relay_ptr, flag_ptr, ticket_ptr, sw_ptr, sx_ptr,
                  M, N, K, SEG_KB, TILES_W, TILES, UNITS, stride_swn, stride_swk, stride_sxm, stride_sxk,
                  BLOCK_W: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr):
    u = tl.atomic_add(ticket_ptr, 1, sem="relaxed", scope="gpu")
    if u == UNITS - 1:
        tl.atomic_xchg(ticket_ptr, 0, sem="relaxed", scope="gpu")  # the last claim: ready for the next launch
    seg = u // TILES
    tile = u % TILES
    off_w = (tile % TILES_W) * BLOCK_W
    off_t = (tile // TILES_W) * BLOCK_T
    offs_w = off_w + tl.arange(0, BLOCK_W)
    offs_t = off_t + tl.arange(0, BLOCK_T)
    mask = (offs_w < N)[:, None] & (offs_t < M)[None, :]
    offs = offs_t[None, :] * N + offs_w[:, None]  # element (t, w) of an [M, N] matrix
    num_kb = tl.cdiv(K, BLOCK_K)
    segments = tl.cdiv(num_kb, SEG_KB)
    kb_lo = seg * SEG_KB
    kb_hi = tl.minimum(kb_lo + SEG_KB, num_kb)
    sw_row = sw_ptr + (off_w // 128) * stride_swn
    sx_ptrs = sx_ptr + offs_t * stride_sxm
    mask_t = offs_t < M
    acc = tl.zeros((BLOCK_W, BLOCK_T), dtype=tl.float32)
    if seg == 0:
        for kb in range(kb_lo, kb_hi):
            a = w_desc.load([off_w, kb * BLOCK_K])
            b = x_desc.load([off_t, kb * BLOCK_K]).T
            s = tl.load(sw_row + kb * stride_swk) * tl.load(sx_ptrs + kb * stride_sxk, mask=mask_t, other=0.0)
            acc += tl.dot(a, b) * s[None, :]
    else:
        for kb in range(kb_lo, kb_hi):
            a = w_desc.load([off_w, kb * BLOCK_K])
            b = x_desc.load([off_t, kb * BLOCK_K]).T
            tl.store(stash_ptr + kb * M * N + offs, tl.dot(a, b), mask=mask)
        while tl.atomic_add(flag_ptr + tile, 0, sem="acquire", scope="gpu") < seg:
            pass
        acc = tl.load(relay_ptr + offs, mask=mask, other=0.0, cache_modifier=".cg")
        for kb in range(kb_lo, kb_hi):
            p = tl.load(stash_ptr + kb * M * N + offs, mask=mask, other=0.0)
            s = tl.load(sw_row + kb * stride_swk) * tl.load(sx_ptrs + kb * stride_sxk, mask=mask_t, other=0.0)
            acc += p * s[None, :]
    if seg == segments - 1:
        tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)
        tl.atomic_xchg(flag_ptr + tile, 0, sem="relaxed", scope="gpu")
    else:
        tl.store(relay_ptr + offs, acc, mask=mask)
        tl.debug_barrier()
        tl.atomic_xchg(flag_ptr + tile, seg + 1, sem="release", scope="gpu")


_BUFS: dict = {}


def relay(xq, wq, segments, block_t, stages=6, block_w=64):
    m, k = xq.data.shape
    n = wq.data.shape[0]
    num_kb = triton.cdiv(k, 128)
    seg_kb = triton.cdiv(num_kb, segments)
    segments = triton.cdiv(num_kb, seg_kb)
    tiles_w = triton.cdiv(n, block_w)
    tiles = tiles_w * triton.cdiv(m, block_t)
    key = (m, n, k)
    if key not in _BUFS:
        _BUFS[key] = (torch.empty(num_kb, m, n, device="cuda", dtype=torch.float32),
                      torch.empty(m, n, device="cuda", dtype=torch.float32),
                      torch.zeros(tiles + 1, device="cuda", dtype=torch.int32))
    stash, relay_buf, flags = _BUFS[key]
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    w_desc = TensorDescriptor.from_tensor(wq.data, [block_w, 128])
    x_desc = TensorDescriptor.from_tensor(xq.data, [block_t, 128])
    units = tiles * segments
    _relay_kernel[(units,)](w_desc, x_desc, c, stash, relay_buf, flags, flags[tiles:], wq.scale, xq.scale,
                            m, n, k, seg_kb, tiles_w, tiles, units, *wq.scale.stride(), *xq.scale.stride(),
                            BLOCK_W=block_w, BLOCK_T=block_t, BLOCK_K=128, num_warps=4, num_stages=stages)
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
        for m in (1, 16, 64):
            bt = 16 if m <= 16 else 64
            cands = {f"relay{s}": (lambda xq, wq, s=s: relay(xq, wq, s, bt)) for s in (1, 2, 3, 4)}
            cands["relay2_s8"] = lambda xq, wq: relay(xq, wq, 2, bt, stages=8)
            cands["split_default"] = lambda xq, wq: fp8_gemm(xq, wq, kernel=Kernel.TRITON)
            cands["pinned"] = lambda xq, wq: fp8_gemm(xq, wq, kernel=Kernel.CUBLAS_PINNED)
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
                    same = name == "split_default" or all(torch.equal(fn(xq0, wq0), pin[:m]) for _ in range(3))
                    row[name] = t(fn) if same else "other bits"
                except Exception as err:  # noqa: BLE001
                    row[name] = f"{type(err).__name__}: {str(err)[:200]}"
            row["bf16_again_us"] = t(lambda xb, wb: torch.mm(xb, wb.t()), bsets)
            out.append(row)
            json.dump(out, open(path, "w"), indent=1)
            print(f"  {n}x{k} M={m}: bf16 {row['bf16_us']:.1f}/{row['bf16_again_us']:.1f} us; " + ", ".join(
                f"{k2} {row['bf16_us'] / v:.2f}x" for k2, v in row.items() if isinstance(v, float)
                and not k2.startswith("bf16")) + "; " + ", ".join(
                f"{k2}: {v}" for k2, v in row.items() if isinstance(v, str)), flush=True)


if __name__ == "__main__":
    main()
