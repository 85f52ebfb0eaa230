"""The wgrad GEMM dW = dY^T x X^T (both 1x128 along tokens: jetrl_unified's pair) on cuBLAS (torch._scaled_mm,
what AUTO ran before this session) and on the Gluon pair kernel (`gluon_wgrad`), beside BF16's dy^T @ x and the
blocks form (X^T in 128x128 blocks: AUTO's DeepGEMM / Gluon 1d2d), for the 8B projections (N x K) at 8192 and
16384 tokens. The kinds take turns call by call (`gemm.timed_turns`, eager), median of 30 over two input sets;
ms, TFLOP/s and x BF16, in --rounds rounds. First, bits: the Gluon pair against the Triton kernel's one-segment
walk on the first shape."""
import argparse

import torch

from precision_engine.bench.gemm import timed_turns
from precision_engine.numerics import gemm, quantize as Q
from precision_engine.numerics.capabilities import Gemm
from precision_engine.numerics.formats import PRESET_FORMATS as P, Kernel
from precision_engine.numerics.gluon_wgrad import gluon_pair_gemm
from precision_engine.numerics.triton_gemm import PREFILL, block_scaled_gemm

act, tok, blk = P["fp8_group_act"], P["fp8_group_tokens"], P["fp8_block_weight"]
SHAPES = ((4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (12288, 4096), (4096, 12288), (6144, 4096),
          (28672, 4096))
parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=2)
parser.add_argument("--tokens", default="8192,16384")
opts = parser.parse_args()


def operands(m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    dy = torch.randn(m, n, device="cuda", generator=g).bfloat16()
    xq = Q.quantize_rows_1xG(x, act)
    return x, dy, Q.quantize_tokens_transposed(dy, tok), Q.requantize_tokens_transposed(xq, tok), \
        Q.requantize_blocks_transposed(xq, blk)


KINDS = {
    "bf16": lambda x, dy, dyt, xt, xb: dy.t() @ x,
    "cublas": lambda x, dy, dyt, xt, xb: gemm.fp8_gemm(dyt, xt, kernel=Kernel.CUBLAS, gemm=Gemm.WGRAD),
    "gluon_pair": lambda x, dy, dyt, xt, xb: gluon_pair_gemm(dyt.data, dyt.scale, xt.data, xt.scale),
    "auto_pair": lambda x, dy, dyt, xt, xb: gemm.fp8_gemm(dyt, xt, gemm=Gemm.WGRAD),
    "blocks": lambda x, dy, dyt, xt, xb: gemm.fp8_gemm(dyt, xb, gemm=Gemm.WGRAD),
}

x, dy, dyt, xt, xb = operands(8192, 4096, 4096, 0)
ref = block_scaled_gemm(dyt.data, dyt.scale, xt.data, xt.scale, b_scale_rows=1, config=PREFILL, split=False)
out = gluon_pair_gemm(dyt.data, dyt.scale, xt.data, xt.scale)
exact = dy.double().t() @ x.double()
print("bits gluon_pair == triton:", torch.equal(out.view(torch.uint16), ref.view(torch.uint16)))
for name, fn in KINDS.items():
    o = fn(x, dy, dyt, xt, xb)
    print(f"error vs float64 {name}: {((o.double() - exact).norm() / exact.norm()).item():.4e}")
del x, dy, dyt, xt, xb, ref, out, exact

print(f"{'round':>5} {'tokens':>6} {'N x K':>11} " + " ".join(f"{k + ' ms':>14} {'TF/s':>5} {'x':>5}" for k in KINDS))
for r in range(opts.rounds):
    for m in map(int, opts.tokens.split(",")):
        for n, k in SHAPES:
            sets = [operands(m, n, k, seed) for seed in range(2)]
            times = timed_turns(list(KINDS.values()), sets, graphed=False, warmup=5, reps=30)
            t = dict(zip(KINDS, times))
            flop = 2 * m * n * k
            print(f"{r:>5} {m:>6} {n:>5}x{k:<5} " + " ".join(
                f"{t[kd]:>14.3f} {flop / t[kd] / 1e9:>5.0f} {t['bf16'] / t[kd]:>5.2f}" for kd in KINDS), flush=True)
            del sets
