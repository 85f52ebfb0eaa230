"""Every cuBLASLt algorithm the heuristic offers for the wgrad GEMM (1x128 x 1x128, both along tokens), timed
against torch._scaled_mm's own pick on the same operands. Not part of the package: a device-call tool for issue
12, where the wgrad GEMM is the step's largest kernel (graphed 8B steps, 2026-12-04: 37-40% of the FP8 step's GPU
time, 1.4-1.5x the block-scaled forward GEMM's time for the same FLOPs).

Each row: the algorithm's config fields, median ms over rotating operand sets (40 runs), the ratio against
_scaled_mm, and whether its output equals _scaled_mm's bit for bit.

    python scripts/probe_wgrad_algorithms.py [--tokens 8192]
"""

import argparse
import statistics

import torch

from precision_engine.bench.gemm import SHAPES_8B
from precision_engine.bench.timing import rotation, time_cuda
from precision_engine.numerics import cublas_pinned
from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.gemm import _cublas_operands
from precision_engine.numerics.quantize import quantize_tokens_transposed

parser = argparse.ArgumentParser()
parser.add_argument("--tokens", type=int, default=8192)
args = parser.parse_args()
ext = cublas_pinned.extension()
fp8, bf16 = torch.float8_e4m3fn, torch.bfloat16
workspace = torch.empty(cublas_pinned.WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
print("| N x K | algo | tile | stages | cluster | split-K | reduction | swizzle | ms | x _scaled_mm | bits |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for n, k in SHAPES_8B:
    def make():
        dy = torch.randn(args.tokens, n, device="cuda", dtype=bf16)
        x = torch.randn(args.tokens, k, device="cuda", dtype=bf16)
        ops = _cublas_operands(quantize_tokens_transposed(dy, P["fp8_group_tokens"]),
                               quantize_tokens_transposed(x, P["fp8_group_tokens"]), 1)
        return (*ops, torch.empty(n, k, device="cuda", dtype=bf16))

    torch.manual_seed(0)
    sets = rotation(make, args.tokens * (n + k) + 2 * n * k)

    def scaled_mm(a, sa, b, sb, out):
        return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=bf16, out=out)

    base = scaled_mm(*sets[0]).clone()
    base_ms = statistics.median(time_cuda(scaled_mm, warmup=5, reps=40, inputs_rotation=sets))
    print(f"| {n}x{k} | _scaled_mm | | | | | | | {base_ms:.3f} | 1.00 | |")
    a, sa, b, sb, _ = sets[0]
    offered = ext.algorithms(sa, sb, n, k, args.tokens, fp8, fp8, bf16, False, 16, cublas_pinned.WORKSPACE_BYTES)
    for row in offered.tolist():
        index, algo_id, tile, split_k, reduction, swizzle, custom, stages, inner, cluster, need = row

        def pinned(a, sa, b, sb, out, index=index):
            ext.matmul(index, a, sa, b, sb, False, out, workspace)
            return out

        try:
            got = pinned(*sets[0]).clone()
            ms = statistics.median(time_cuda(pinned, warmup=5, reps=40, inputs_rotation=sets))
        except RuntimeError as err:
            print(f"| {n}x{k} | {algo_id} | {tile} | {stages} | {cluster} | {split_k} | {reduction} | {swizzle} | "
                  f"failed: {str(err)[:60]} | | |")
            continue
        print(f"| {n}x{k} | {algo_id} | {tile} | {stages} | {cluster} | {split_k} | {reduction} | {swizzle} | "
              f"{ms:.3f} | {base_ms / ms:.2f} | {'same' if torch.equal(got, base) else 'differ'} |")
    del sets
