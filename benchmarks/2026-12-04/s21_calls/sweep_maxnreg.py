"""Register caps (`maxnreg`) for the training step's quantizers, timed on the GPU. Not part of the package: a
device-call tool for issue 12's quantizer bandwidth.

Nsight Compute (2026-12-04, H200) found all four quantizers latency-bound with their occupancy limited by
registers: the grad-output and tokens-transposed kernels at 95 registers (5 blocks of 4 warps per SM, 31%
occupancy, issue slots 55-58% busy), the 1x128 one at 64, the 128x128 block one at 127. A cap trades registers for
warps in flight; this times each kernel under each cap over rotating inputs past the L2 (median of 40) against a
device copy in the same run, and checks that every capped launch writes the uncapped one's bytes.

    python benchmarks/2026-12-04/s21_calls/sweep_maxnreg.py
"""

import torch

from precision_engine.bench.quant import (activation_bytes, copy_bandwidth, grad_output_bytes, requantize_bytes,
                                          weight_bytes)
from precision_engine.bench.timing import gbps, median, rotation, time_cuda
from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.contract import block_buffers
from precision_engine.numerics.formats import PRESET_FORMATS as P

CAPS = (None, 88, 80, 72, 64, 56, 48)
ACT, TOK, WFMT = P["fp8_group_act"], P["fp8_group_tokens"], P["fp8_block_weight"]


def grad_output(m, c, cap):
    config = {**T._DUAL_CONFIG, **({"maxnreg": cap} if cap else {})}
    return (lambda dy: T.quantize_rows_and_tokens_transposed(dy, ACT, TOK, config=config),
            lambda: (torch.randn(m, c, device="cuda", dtype=torch.bfloat16),), grad_output_bytes(m, c))


def requant(m, k, cap):
    config = {**T._REQUANT_CONFIG, **({"maxnreg": cap} if cap else {})}
    return (lambda q: T.requantize_tokens_transposed(q, TOK, config=config),
            lambda: (T.quantize_rows(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), ACT),),
            requantize_bytes(m, k))


def rows(m, k, cap):
    config = {**T._ROWS_CONFIG, **({"maxnreg": cap} if cap else {})}
    return (lambda x: T.quantize_rows(x, ACT, config=config),
            lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),), activation_bytes(m, k))


def blocks(n, k, cap):
    config = {**T._BLOCKS_CONFIG, **({"maxnreg": cap} if cap else {})}

    def run(w):
        out_t = block_buffers(k, n, WFMT, w.device)
        return T.quantize_blocks(w, WFMT, out_t=out_t, config=config), out_t

    return (run, lambda: (torch.randn(n, k, device="cuda", dtype=torch.bfloat16),), weight_bytes(n, k) + n * k)


def flat(result):
    if isinstance(result, tuple):
        return [t for part in result for t in flat(part)]
    return [result.data.view(torch.uint8), result.scale] if hasattr(result, "scale") else [result]


CASES = [("grad output", grad_output, (8192, 6144)), ("grad output", grad_output, (8192, 28672)),
         ("requant", requant, (8192, 4096)), ("requant", requant, (8192, 14336)),
         ("rows", rows, (8192, 4096)), ("rows", rows, (8192, 14336)),
         ("blocks+T", blocks, (6144, 4096)), ("blocks+T", blocks, (28672, 4096))]

copy = copy_bandwidth()
print(f"copy {copy:.0f} GB/s")
print("| kernel | shape | maxnreg | us | % copy | bytes == uncapped |\n|---|---|---:|---:|---:|---|")
for name, case, shape in CASES:
    reference = None
    for cap in CAPS:
        fn, make, nbytes = case(*shape, cap)
        torch.manual_seed(0)
        sets = rotation(make, nbytes * 2)
        try:
            got = [t.clone() for t in flat(fn(*sets[0]))]
            ms = median(time_cuda(fn, warmup=5, reps=40, inputs_rotation=sets))
        except Exception as err:  # noqa: BLE001 (one cap failing to compile must not lose the others)
            print(f"| {name} | {shape[0]}x{shape[1]} | {cap} | failed: {type(err).__name__}: {str(err)[:80]} |")
            continue
        reference = reference or got
        same = all(torch.equal(a, b) for a, b in zip(got, reference))
        print(f"| {name} | {shape[0]}x{shape[1]} | {cap or '-'} | {ms * 1e3:.1f} | "
              f"{100 * gbps(nbytes, ms) / copy:.1f} | {same} |")
        del sets
