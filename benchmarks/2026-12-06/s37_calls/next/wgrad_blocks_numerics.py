"""How much accuracy the FP8 wgrad would give up with X^T in 128x128 blocks (tokens x channels) instead of 128x1
groups along tokens: the block form is the fprop's GEMM (1x128 by 128x128), which DeepGEMM and cuBLAS run about
1.3x faster than the 1x128-by-1x128 wgrad (BENCHMARKS, thirty-seventh session, call 9). CPU, the package's
quantizers and reference GEMM, dW = dy^T x against float64; x with outlier channels, dy with per-token magnitudes
spread over three decades (as a GRPO step's advantages and masks make them). Prints a table; runs in about a
minute."""

import torch

from precision_engine.numerics import gemm, quantize as Q
from precision_engine.numerics.formats import PRESET_FORMATS as P


def rel(a, ref, quiet):
    """Norm-relative error over the whole dW / over the columns of the quiet channels (where blocks shared with a
    loud channel would lose their low bits)."""
    err = a.double() - ref
    return (err.norm() / ref.norm()).item(), (err[:, quiet].norm() / ref[:, quiet].norm()).item()


def cell(pair):
    return f"{pair[0]:.2e} / {pair[1]:.2e}"


def case(m, k, n, outlier_gain, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    hot = torch.randperm(k, generator=g)[: k // 64]
    x[:, hot] *= outlier_gain  # a few channels far louder than the rest, as in LLM activations
    dy = torch.randn(m, n, generator=g) * torch.logspace(-3, 0, m)[torch.randperm(m, generator=g), None]
    quiet = torch.ones(k, dtype=torch.bool)
    quiet[hot] = False
    return x.bfloat16(), dy.bfloat16(), quiet


act, tok, blk = P["fp8_group_act"], P["fp8_group_tokens"], P["fp8_block_weight"]
print("dW = dy^T x against float64, norm-relative error: all of dW / the quiet channels' columns")
print(f"{'m x k x n':>16} {'outliers':>9} {'tokens^T (now)':>21} {'X^T 128x128':>21} {'dY^T 128x128':>21}")
for m, k, n in ((2048, 512, 512), (4096, 1024, 256)):
    for gain in (1.0, 30.0, 300.0, 3000.0):
        x, dy, quiet = case(m, k, n, gain, seed=m + k + int(gain))
        ref = dy.double().t() @ x.double()
        xq = Q.quantize_rows_1xG(x, act)  # what the forward saves
        x_back = Q.dequantize(xq).bfloat16()
        dyt = Q.quantize_tokens_transposed(dy, tok)
        now = gemm.reference_gemm(dyt, Q.requantize_tokens_transposed(xq, tok), out_dtype=torch.float32)
        xt_blocks = Q.quantize_blocks(x_back.t().contiguous(), blk)
        x_blocks = gemm.reference_gemm(dyt, xt_blocks, out_dtype=torch.float32)
        xt = Q.requantize_tokens_transposed(xq, tok)
        dyt_blocks = Q.quantize_blocks(dy.t().contiguous(), blk)
        dy_blocks = gemm.reference_gemm(xt, dyt_blocks, out_dtype=torch.float32).t()
        print(f"{m:>5}x{k}x{n:<5} {gain:>9.0f} {cell(rel(now, ref, quiet)):>21} {cell(rel(x_blocks, ref, quiet)):>21} "
              f"{cell(rel(dy_blocks, ref, quiet)):>21}")
