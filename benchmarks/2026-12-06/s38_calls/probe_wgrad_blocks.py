"""The FP8 wgrad GEMM in the two operand forms, on one GPU (run with DeepGEMM built: scripts/device_deep_gemm.sh):
  tokens^T  dW = dY^T (1x128 along tokens) x X^T (1x128 along tokens): what the backward runs now (cuBLAS);
  blocks    dW = dY^T (1x128 along tokens) x X^T in 128x128 blocks (tokens x channels): the fprop's GEMM form,
            which AUTO runs on DeepGEMM (1x128 by 128x128) where it is installed;
against BF16's dy^T @ x, for the 8B projections (N x K) at 8192 and 16384 tokens: median ms of 30 calls over two
input sets, TFLOP/s and x BF16, and each form's error against float64 on the first shape. Then each form's
re-quantizer from the saved Q(x) [tokens, K] (`quantize.requantize_tokens_transposed`, and
`requantize_blocks_transposed` as `quantize` routes it: the reference composition, or a fused kernel where one is
wired), median ms. Prints two tables."""

import torch

from precision_engine.bench.timing import median, time_cuda
from precision_engine.numerics import gemm, quantize as Q
from precision_engine.numerics.capabilities import Gemm
from precision_engine.numerics.formats import PRESET_FORMATS as P

act, tok, blk = P["fp8_group_act"], P["fp8_group_tokens"], P["fp8_block_weight"]
SHAPES = ((4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336))


def operands(m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    dy = torch.randn(m, n, device="cuda", generator=g).bfloat16()
    xq = Q.quantize_rows_1xG(x, act)
    dyt = Q.quantize_tokens_transposed(dy, tok)
    xt = Q.requantize_tokens_transposed(xq, tok)
    xt_blocks = Q.requantize_blocks_transposed(xq, blk)
    return x, dy, dyt, xt, xt_blocks, xq


rows = []
for m in (8192, 16384):
    for n, k in SHAPES:
        sets = [operands(m, n, k, seed) for seed in range(2)]
        flop = 2 * m * n * k
        t = {"bf16": median(time_cuda(lambda x, dy, *_: dy.t() @ x, reps=30, inputs_rotation=sets)),
             "tokens^T": median(time_cuda(lambda x, dy, dyt, xt, xb, xq: gemm.fp8_gemm(dyt, xt, gemm=Gemm.WGRAD),
                                          reps=30, inputs_rotation=sets)),
             "blocks": median(time_cuda(lambda x, dy, dyt, xt, xb, xq: gemm.fp8_gemm(dyt, xb, gemm=Gemm.WGRAD),
                                        reps=30, inputs_rotation=sets))}
        requant = {"tokens^T": median(time_cuda(lambda *s: Q.requantize_tokens_transposed(s[-1], tok), reps=30,
                                                inputs_rotation=sets)),
                   "blocks": median(time_cuda(lambda *s: Q.requantize_blocks_transposed(s[-1], blk), reps=30,
                                              inputs_rotation=sets))}
        rows.append((m, n, k, t, flop, requant))
        if m == 8192 and (n, k) == SHAPES[0]:
            x, dy, dyt, xt, xb, _ = sets[0]
            ref = dy.double().t() @ x.double()
            errors = {name: ((out.double() - ref).norm() / ref.norm()).item() for name, out in
                      (("tokens^T", gemm.fp8_gemm(dyt, xt, gemm=Gemm.WGRAD)),
                       ("blocks", gemm.fp8_gemm(dyt, xb, gemm=Gemm.WGRAD)))}
        del sets
print(f"errors against float64 (8192 x 4096 x 4096): {errors}")
print(f"{'tokens':>7} {'N x K':>11} {'bf16 ms':>8} {'tokens^T ms':>12} {'TFLOP/s':>8} {'x':>5} {'blocks ms':>10} "
      f"{'TFLOP/s':>8} {'x':>5}")
for m, n, k, t, flop, _ in rows:
    print(f"{m:>7} {n:>5}x{k:<5} {t['bf16']:>8.3f} {t['tokens^T']:>12.3f} {flop / t['tokens^T'] / 1e9:>8.0f} "
          f"{t['bf16'] / t['tokens^T']:>5.2f} {t['blocks']:>10.3f} {flop / t['blocks'] / 1e9:>8.0f} "
          f"{t['bf16'] / t['blocks']:>5.2f}")
print(f"\n{'tokens':>7} {'K':>6} {'requant tokens^T ms':>20} {'requant blocks ms':>18}")
for m, n, k, _, _, requant in rows:
    if n == 4096:  # one row per (tokens, K): the re-quantizers read x only
        print(f"{m:>7} {k:>6} {requant['tokens^T']:>20.3f} {requant['blocks']:>18.3f}")
