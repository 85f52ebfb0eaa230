"""The wgrad pair's Gluon kernel's launch choices (column halves, ring stages, group order) against cuBLAS and
BF16 on the 8B wgrad shapes, the kinds taking turns call by call (eager, median of 30 over two input sets), one
round: ms and x BF16."""

import torch

from precision_engine.bench.gemm import timed_turns
from precision_engine.numerics import gemm, quantize as Q
from precision_engine.numerics.capabilities import Gemm
from precision_engine.numerics.formats import PRESET_FORMATS as P, Kernel
from precision_engine.numerics.gluon_wgrad import gluon_pair_gemm

tok = P["fp8_group_tokens"]
SHAPES = ((4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (12288, 4096), (4096, 12288), (6144, 4096),
          (28672, 4096))


def operands(m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    dy = torch.randn(m, n, device="cuda", generator=g).bfloat16()
    return x, dy, Q.quantize_tokens_transposed(dy, tok), Q.quantize_tokens_transposed(x, tok)


def pair(**kw):
    return lambda x, dy, dyt, xt: gluon_pair_gemm(dyt.data, dyt.scale, xt.data, xt.scale, **kw)


KINDS = {
    "bf16": lambda x, dy, dyt, xt: dy.t() @ x,
    "cublas": lambda x, dy, dyt, xt: gemm.fp8_gemm(dyt, xt, kernel=Kernel.CUBLAS, gemm=Gemm.WGRAD),
    "one_s6": pair(split_n=False),
    "half_s6": pair(split_n=True),
    "half_s4": pair(split_n=True, stages=4),
    "half_s6_g1": pair(split_n=True, group_m=1),
    "half_s6_g16": pair(split_n=True, group_m=16),
}
print(f"{'tokens':>6} {'N x K':>11} " + " ".join(f"{k:>10} {'x':>5}" for k in KINDS))
for m in (8192, 16384):
    for n, k in SHAPES:
        sets = [operands(m, n, k, seed) for seed in range(2)]
        t = dict(zip(KINDS, timed_turns(list(KINDS.values()), sets, graphed=False, warmup=5, reps=30)))
        print(f"{m:>6} {n:>5}x{k:<5} " + " ".join(f"{t[kd]:>10.3f} {t['bf16'] / t[kd]:>5.2f}" for kd in KINDS),
              flush=True)
        del sets
