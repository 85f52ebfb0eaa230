"""Block-scaled FP8 GEMM in Triton: c[M, N] = (a * sa) @ (b * sb)^T, both operands K-major FP8.

Why our own kernel: cuBLAS picks its algorithm (tiling, split-K) from the problem size, so a token's row can
change with the batch it rides in, and at decode sizes (M <= 64) it is slower than BF16. This kernel fixes the
arithmetic of every output element independently of M:

- K is walked in 128-wide blocks in increasing order; each block's FP8 dot product goes to the tensor cores with
  a fresh FP32 accumulator, is scaled by sa[m, kb] * sb[n, kb] and added to the running FP32 sum. No split-K.
- The tile shape only decides which program computes an element, not how: the decode configs (narrow tiles,
  many programs, two K blocks per step, to keep many weight loads in flight) and the prefill config give the
  same bits per row (checked on the GPU by tests/numerics/gpu/test_gemm_gpu.py).

Scales: `sa` is [M, ceil(K/128)] (1x128 groups, any strides); `sb` is [ceil(N/SCALE_BN), ceil(K/128)] with
SCALE_BN = 128 for 128x128 weight blocks or 1 for 1x128 groups (the wgrad pair).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from precision_engine.numerics.gemm import SMALL_M_MAX  # M at or below this uses the decode tiles

BLOCK_K = 128  # one scale block per K step: the scale granularity of every operand we multiply


@dataclass(frozen=True)
class GemmConfig:
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    pair: bool = False  # two K blocks per loop step (same arithmetic, more overlap)


# Prefill/training tiles: the fastest configuration of the H200 tile sweep (scripts/gemm_tiles.py).
PREFILL = GemmConfig(block_m=128, block_n=128, num_warps=8, num_stages=3)
# Decode: at least ~192 programs on 132 SMs, with the widest tile that allows it (fewer, longer weight streams
# lose to more programs below that; measured with scripts/gemm_tiles.py on an H200, 2026-11-30).
_DECODE_MIN_PROGRAMS = 192


@triton.jit
def _scaled_block_dot(a_ptrs, b_ptrs, sa_ptrs, sb_ptrs, kb, K, offs_k, mask_m, mask_n,
                      stride_ak, stride_bk, stride_sak, stride_sbk, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """One 128-wide K block: its FP8 dot product (fresh FP32 accumulator) and its scale sa[m] * sb[n]."""
    a_ptrs += kb * BLOCK_K * stride_ak
    b_ptrs += kb * BLOCK_K * stride_bk
    if EVEN_K:
        a = tl.load(a_ptrs, mask=mask_m[:, None], other=0.0)
        b = tl.load(b_ptrs, mask=mask_n[None, :], other=0.0)
    else:
        k_left = K - kb * BLOCK_K
        a = tl.load(a_ptrs, mask=mask_m[:, None] & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=mask_n[None, :] & (offs_k[:, None] < k_left), other=0.0)
    sa = tl.load(sa_ptrs + kb * stride_sak, mask=mask_m, other=0.0)
    sb = tl.load(sb_ptrs + kb * stride_sbk, mask=mask_n, other=0.0)
    return tl.dot(a, b), sa[:, None] * sb[None, :]


@triton.jit
def _fp8_block_gemm_kernel(
    a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bn, stride_bk, stride_cm, stride_cn,
    stride_sam, stride_sak, stride_sbn, stride_sbk,
    SCALE_BN: tl.constexpr, EVEN_K: tl.constexpr, PAIR: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # Grouped program order so that neighbouring programs share operand tiles in L2; numerics-neutral.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pids_per_group = GROUP_M * num_pid_n
    first_pid_m = (pid // pids_per_group) * GROUP_M
    group_rows = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % pids_per_group) % group_rows
    pid_n = (pid % pids_per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_n[None, :] * stride_bn + offs_k[:, None] * stride_bk
    sa_ptrs = sa_ptr + offs_m * stride_sam
    sb_ptrs = sb_ptr + (offs_n // SCALE_BN) * stride_sbn

    # acc = (...((0 + p0*s0) + p1*s1) ...) in increasing kb. PAIR issues two blocks' dots before scaling either,
    # so the tensor cores work on block kb+1 while block kb is scaled; the additions keep the same order.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    num_kb = tl.cdiv(K, BLOCK_K)
    if PAIR:
        for kp in range(0, num_kb // 2):
            p0, s0 = _scaled_block_dot(a_ptrs, b_ptrs, sa_ptrs, sb_ptrs, 2 * kp, K, offs_k, mask_m, mask_n,
                                       stride_ak, stride_bk, stride_sak, stride_sbk, EVEN_K, BLOCK_K)
            p1, s1 = _scaled_block_dot(a_ptrs, b_ptrs, sa_ptrs, sb_ptrs, 2 * kp + 1, K, offs_k, mask_m, mask_n,
                                       stride_ak, stride_bk, stride_sak, stride_sbk, EVEN_K, BLOCK_K)
            acc += p0 * s0
            acc += p1 * s1
        if num_kb % 2:
            p, s = _scaled_block_dot(a_ptrs, b_ptrs, sa_ptrs, sb_ptrs, num_kb - 1, K, offs_k, mask_m, mask_n,
                                     stride_ak, stride_bk, stride_sak, stride_sbk, EVEN_K, BLOCK_K)
            acc += p * s
    else:
        for kb in range(0, num_kb):
            p, s = _scaled_block_dot(a_ptrs, b_ptrs, sa_ptrs, sb_ptrs, kb, K, offs_k, mask_m, mask_n,
                                     stride_ak, stride_bk, stride_sak, stride_sbk, EVEN_K, BLOCK_K)
            acc += p * s

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def config_for(m: int, n: int) -> GemmConfig:
    """The tile config for an [M, N] output: decode tiles up to SMALL_M_MAX rows, prefill tiles above.

    BLOCK_M stays 64 for decode: 16-row tiles (below wgmma's 64-row minimum, so another MMA path) gave
    different bits from the prefill tiles on the H200; every tile of 64 or more rows gave the same bits.
    """
    if m > SMALL_M_MAX:
        return PREFILL
    for block_n, stages in ((64, 3), (32, 4)):
        if n // block_n >= _DECODE_MIN_PROGRAMS:
            return GemmConfig(block_m=64, block_n=block_n, num_warps=4, num_stages=stages, group_m=1, pair=True)
    return GemmConfig(block_m=64, block_n=16, num_warps=4, num_stages=4, group_m=1, pair=True)


def block_scaled_gemm(
    a: torch.Tensor,
    a_scale: torch.Tensor,
    b: torch.Tensor,
    b_scale: torch.Tensor,
    *,
    b_scale_rows: int,
    out_dtype: torch.dtype = torch.bfloat16,
    config: GemmConfig | None = None,
) -> torch.Tensor:
    """c = dequant(a) @ dequant(b)^T for a [M, K] and b [N, K] FP8 (K-major; other strides work, slower).

    `b_scale_rows` is how many rows of b share one scale row: 128 (128x128 blocks) or 1 (1x128 groups).
    `config` defaults to `config_for(M, N)`.
    """
    m, k = a.shape
    n = b.shape[0]
    cfg = config or config_for(m, n)
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    grid = (triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n),)
    _fp8_block_gemm_kernel[grid](
        a, b, c, a_scale, b_scale,
        m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1),
        SCALE_BN=b_scale_rows, EVEN_K=(k % BLOCK_K == 0), PAIR=cfg.pair,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=BLOCK_K, GROUP_M=cfg.group_m,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return c


@triton.jit
def _transpose_kernel(x_ptr, y_ptr, R, C, stride_xr, stride_yr, BLOCK: tl.constexpr):
    offs_r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    tile = tl.load(x_ptr + offs_r[:, None] * stride_xr + offs_c[None, :], mask=mask)
    tl.store(y_ptr + offs_c[:, None] * stride_yr + offs_r[None, :], tl.trans(tile), mask=tl.trans(mask))


def transpose_bytes(x: torch.Tensor) -> torch.Tensor:
    """x^T contiguous for a row-major 1-byte matrix (FP8), through 64x64 tiles."""
    x = x if x.stride(1) == 1 else x.contiguous()
    r, c = x.shape
    y = torch.empty((c, r), dtype=x.dtype, device=x.device)
    if r and c:
        block = 64
        _transpose_kernel[(triton.cdiv(r, block), triton.cdiv(c, block))](
            x.view(torch.uint8), y.view(torch.uint8), r, c, x.stride(0), y.stride(0), BLOCK=block, num_warps=4
        )
    return y
