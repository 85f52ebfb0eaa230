"""Quantizer bandwidth benchmark: bytes moved / time against a device copy measured in the same run.

Bytes are the floor each kernel must move (input read once, FP8 data and fp32 scales written once), so
``% copy`` is directly the fraction of achievable HBM bandwidth reached (issue 3 target for the 1x128
activation quantizer: >= 80%; issue 12 for the re-quantizer: >= 80%, as for its twin writing x^T in 128x128
blocks for a `wgrad_input` in blocks). Fused kernels are timed beside the unfused pair they replace, both
against the fused kernel's floor, so the rows compare directly: the grad-output quantizer (one read of dy, both
layouts written), RMSNorm -> 1x128 (x read, y and its FP8 bytes written) and SiLU(gate) * up -> 1x128 (gate and
up read, h and its FP8 bytes written). ``--sweep`` adds every launch config of the 1x128, tokens-transposed,
re-quantizing (both layouts), grad-output and SiLU-mul kernels, both divisions of the re-quantizer and, where it
runs, its Gluon kernel's program shapes (rows named "<kernel> <config>"): the shipped defaults in
numerics/triton_quant.py, triton_fused_quant.py and gluon_requant.py are one-line choices among them.
The re-quantizers' rows are AUTO's (the Gluon kernels on Hopper for fp32 scales) and the Triton kernels', side
by side.
Each timed call gets the next of several freshly drawn input sets whose total exceeds the L2 several times, and
runs behind a copy of as many bytes (`run`), so that every row is timed behind the same kernel. The re-quantizers
are timed a second time behind the kernel they follow in a linear's backward, its dgrad GEMM (``% dgrad``).
Run: ``precision bench quant [--sweep] [--only PARTS] [--out out.json]``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from precision_engine.bench.timing import gbps, median, rotation, time_cuda, time_cuda_turns
from precision_engine.numerics.formats import PRESET_FORMATS

ACT_SHAPES = [(8192, 4096), (16384, 4096), (8192, 14336), (16384, 14336)]  # tokens x K, Llama-3.1-8B
WEIGHT_SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]  # q/o, gate/up, down projections
# 1x128 launch configs timed by --sweep (BLOCK_M rows x GROUPS groups per program, warps).
ROWS_SWEEP = [(8, 4, 4), (16, 2, 4), (16, 4, 4), (16, 4, 8), (32, 2, 8), (32, 4, 8), (64, 1, 8), (64, 2, 8),
              (128, 1, 8)]
# Tokens-transposed and re-quantizing configs (BLOCK_C columns x CHUNKS per 128-token program, load width
# VEC, warps): the shipped (64, 1, 4, 4), the fewest instructions per element (64, 1, 4, 2: 128 elements per
# thread, 168 registers), and neighbours.
# Fewer values per thread (64 columns at 8 warps, 32 at 4, 16 at 2: 32 each) for the occupancy Nsight Compute
# found register-limited (2026-12-04: 95 registers, 29% occupancy).
TOKENS_SWEEP = [(64, 1, 4, 4), (64, 1, 4, 2), (32, 1, 4, 2), (32, 1, 4, 1), (128, 1, 4, 8), (128, 1, 4, 4),
                (64, 2, 4, 4), (64, 1, 8, 4), (128, 1, 8, 8), (64, 1, 4, 8), (32, 1, 4, 4), (16, 1, 4, 2)]
# The Gluon re-quantizer's programs (warps, lanes along tokens).
GLUON_REQUANT_SWEEP = [(8, 8), (8, 4), (4, 8), (4, 4), (2, 8), (2, 4)]
# The blocks re-quantizer's warps (a program is one 128x128 tile).
BLOCKS_REQUANT_SWEEP = [2, 4, 8]
# Grad-output configs (1x128 programs of BLOCK_M rows, tokens-transposed programs of BLOCK_C columns, warps).
DUAL_SWEEP = [(32, 64, 4), (64, 64, 4), (16, 64, 4), (32, 32, 4), (64, 64, 8), (64, 128, 8), (32, 128, 4),
              (64, 32, 4), (64, 16, 4)]
# SiLU-mul configs (BLOCK_M rows x GROUPS groups per program, warps).
SILU_SWEEP = [(64, 1, 8), (32, 1, 8), (32, 2, 8), (16, 1, 4), (128, 1, 8)]
# Rows with a bandwidth target, % of copy: issue 3's activation quantizer and issue 12's wgrad re-quantizers.
TARGETS = {"1x128 act (triton)": 80.0, "requant fp8 -> tokens^T": 80.0, "requant fp8 -> blocks^T": 80.0}
# The dgrad before a re-quantization of x [M, C] reduces over the linear's outputs: the 8B's hidden size (the o and
# down projections'; q/k/v's and gate/up's are wider, so longer GEMMs).
DGRAD_N = 4096
NORM_SHAPES = [(8192, 4096), (16384, 4096), (8192, 8192)]  # tokens x hidden (8B; 70B)
MLP_SHAPES = [(8192, 14336), (16384, 14336)]  # tokens x intermediate (8B)


def copy_bandwidth(nbytes: int = 1 << 30, *, reps: int = 30, device: str = "cuda") -> float:
    """GB/s of a device-to-device copy, counting bytes read plus bytes written."""
    src = torch.randn(nbytes // 2, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = median(time_cuda(lambda: dst.copy_(src), warmup=5, reps=reps))
    return gbps(2 * nbytes, ms)


def copy_buffers(nbytes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A copy's source (random bytes) and destination, moving `nbytes` read plus written."""
    return (torch.randint(0, 256, (nbytes // 2,), device="cuda", dtype=torch.uint8),
            torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8))


def _copy(src: torch.Tensor, dst: torch.Tensor) -> None:
    """The device copy: the same-bytes rows' kernel, and the one each timed kernel runs behind (`run`)."""
    dst.copy_(src)


def in_backward(kernel: str) -> bool:
    """Whether `run` also times `kernel` behind a dgrad GEMM: the re-quantizers, which follow one in a linear's
    backward (`numerics.linear`)."""
    return kernel.startswith("requant")


def dgrad(m: int, c: int) -> Callable[[], torch.Tensor]:
    """The dgrad GEMM before a re-quantization of x [m, c] in an FP8 linear's backward, on the kernel AUTO runs it
    on here: dx [m, c] = Q(dy) [m, DGRAD_N] in 1x128 groups @ Q(W)^T [c, DGRAD_N] in 128x128 blocks."""
    from precision_engine.numerics import quantize as Q
    from precision_engine.numerics.capabilities import Gemm
    from precision_engine.numerics.gemm import fp8_gemm

    dy = Q.quantize_rows_1xG(torch.randn(m, DGRAD_N, device="cuda", dtype=torch.bfloat16),
                             PRESET_FORMATS["fp8_group_act"])
    wt = Q.quantize_blocks(torch.randn(c, DGRAD_N, device="cuda", dtype=torch.bfloat16),
                           PRESET_FORMATS["fp8_block_weight"])
    return lambda: fp8_gemm(dy, wt, gemm=Gemm.DGRAD)


def same_bytes_copy(kernel: str) -> str:
    """The row of a device copy moving as many bytes as `kernel` on each shape: the copy's rate at 1 GiB is the
    targets' yardstick; at the kernel's own size it also pays the launch and the last wave, which is the most any
    kernel of that size could reach."""
    return f"copy, the bytes of {kernel}"


def activation_bytes(m: int, k: int, in_bytes: int = 2) -> int:
    """A 1x128 quantization of [m, k]: its input read, its FP8 bytes and fp32 scales written."""
    return m * k * in_bytes + m * k + 4 * m * -(-k // 128)


def requantize_bytes(m: int, k: int) -> int:
    """The wgrad re-quantization of a saved 1x128 activation: its FP8 bytes and scales read, 128x1 written."""
    return activation_bytes(m, k, in_bytes=1) + 4 * m * -(-k // 128)


def requantize_blocks_bytes(m: int, k: int) -> int:
    """The saved 1x128 activation re-quantized into 128x128 blocks of x^T: its FP8 bytes and scales read, x^T's FP8
    bytes (tokens padded to whole blocks) and block scales written."""
    m_pad = -(-m // 128) * 128
    return m * k + 4 * m * -(-k // 128) + k * m_pad + 4 * -(-k // 128) * (m_pad // 128)


def grad_output_bytes(m: int, k: int) -> int:
    """dy [m, k] read once, both of its layouts (1x128 and 128x1 along tokens) written."""
    return activation_bytes(m, k) + m * k + 4 * m * -(-k // 128)


def weight_bytes(n: int, k: int) -> int:
    """A 128x128-block quantization of W [n, k]: W read, its FP8 bytes and block scales written."""
    return 3 * n * k + 4 * -(-n // 128) * -(-k // 128)


def _cases(sweep: bool) -> list[tuple[str, tuple[int, int], Callable, Callable[[], tuple], int]]:
    """(kernel, shape, fn, make_inputs, bytes) for every measurement."""
    from dataclasses import replace

    from precision_engine.numerics import fused_quant as F
    from precision_engine.numerics import gluon_requant, invariant
    from precision_engine.numerics import quantize as Q
    from precision_engine.numerics import triton_fused_quant as TF
    from precision_engine.numerics import triton_quant as T
    from precision_engine.numerics.formats import ScaleKind

    act, tok = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_group_tokens"]
    blk, ten = PRESET_FORMATS["fp8_block_weight"], PRESET_FORMATS["fp8_tensor"]
    act_pow2, tok_pow2 = replace(act, scale=ScaleKind.POW2), replace(tok, scale=ScaleKind.POW2)

    def copy_inputs(nbytes):
        return lambda: copy_buffers(nbytes)

    def bf16(*shapes):
        return lambda: tuple(torch.randn(shape, device="cuda", dtype=torch.bfloat16) for shape in shapes)

    def saved(shape, fmt=act):
        return lambda: (Q.quantize_rows_1xG(torch.randn(shape, device="cuda", dtype=torch.bfloat16), fmt),)

    def norm_inputs(shape):
        return lambda: (torch.randn(shape, device="cuda", dtype=torch.bfloat16),
                        (1 + 0.1 * torch.randn(shape[1], device="cuda")).to(torch.bfloat16))

    def separate(x):
        Q.quantize_rows_1xG(x, act)
        Q.quantize_tokens_transposed(x, tok)

    def unfused_norm(x, w):
        Q.quantize_rows_1xG(invariant.rms_norm(x, w, 1e-5), act)

    def unfused_silu(gate, up):
        Q.quantize_rows_1xG(invariant.silu(gate) * up, act)

    gluon = sweep and torch.cuda.is_available() and gluon_requant.available(torch.device("cuda"))
    cases = []
    for m, k in ACT_SHAPES:
        shape = (m, k)
        nbytes = activation_bytes(m, k)
        requant_bytes = requantize_bytes(m, k)
        blocks_bytes = requantize_blocks_bytes(m, k)
        dual_bytes = grad_output_bytes(m, k)
        cases.append(("1x128 act (triton)", shape, lambda x: Q.quantize_rows_1xG(x, act), bf16(shape), nbytes))
        cases.append((same_bytes_copy("1x128 act (triton)"), shape, _copy, copy_inputs(nbytes), nbytes))
        cases.append(("1x128 act exact-round", shape, lambda x: T.quantize_rows(x, act, exact_round=True),
                      bf16(shape), nbytes))
        cases.append(("1x128 act (torch ref)", shape, lambda x: Q.quantize_rows_1xG(x, act, backend="reference"),
                      bf16(shape), nbytes))
        if sweep:
            for bm, groups, warps in ROWS_SWEEP:
                config = {"BLOCK_M": bm, "GROUPS": groups, "num_warps": warps}
                name = f"1x128 act bm{bm} g{groups} w{warps}"
                cases.append((name, shape, lambda x, c=config: T.quantize_rows(x, act, config=c), bf16(shape), nbytes))
        cases.append(("128x1 tokens^T", shape, lambda x: Q.quantize_tokens_transposed(x, tok), bf16(shape), nbytes))
        cases.append(("requant fp8 -> tokens^T", shape, lambda q: Q.requantize_tokens_transposed(q),
                      saved(shape), requant_bytes))
        cases.append((same_bytes_copy("requant fp8 -> tokens^T"), shape, _copy, copy_inputs(requant_bytes),
                      requant_bytes))
        cases.append(("requant fp8 triton kernel", shape, lambda q: T.requantize_tokens_transposed(q, tok),
                      saved(shape), requant_bytes))
        cases.append(("requant pow2 -> tokens^T", shape, lambda q: Q.requantize_tokens_transposed(q),
                      saved(shape, act_pow2), requant_bytes))
        cases.append(("requant pow2 triton kernel", shape, lambda q: T.requantize_tokens_transposed(q, tok_pow2),
                      saved(shape, act_pow2), requant_bytes))
        cases.append(("requant fp8 -> blocks^T", shape, lambda q: Q.requantize_blocks_transposed(q, blk),
                      saved(shape), blocks_bytes))
        cases.append((same_bytes_copy("requant fp8 -> blocks^T"), shape, _copy, copy_inputs(blocks_bytes),
                      blocks_bytes))
        cases.append(("requant blocks triton kernel", shape, lambda q: T.requantize_blocks_transposed(q, blk),
                      saved(shape), blocks_bytes))
        cases.append(("dy 1x128+tokens^T fused", shape,
                      lambda x: Q.quantize_rows_and_tokens_transposed(x, act, tok), bf16(shape), dual_bytes))
        cases.append(("dy 1x128+tokens^T 2 kernels", shape, separate, bf16(shape), dual_bytes))
        if sweep:
            cases.append(("requant fp8 div.rn -> tokens^T", shape,
                          lambda q: T.requantize_tokens_transposed(q, tok, ieee_div=True), saved(shape),
                          requant_bytes))
            if gluon:
                for warps, lanes in GLUON_REQUANT_SWEEP:
                    for kind, src, dst in (("", act, tok), ("pow2 ", act_pow2, tok_pow2)):
                        for ring in (False, True):
                            cases.append((f"requant {kind}gluon w{warps} t{lanes}{' ring' if ring else ''}", shape,
                                          lambda q, d=dst, w=warps, t=lanes, r=ring:
                                          gluon_requant.requantize_tokens_transposed(q, d, w, t, r),
                                          saved(shape, src), requant_bytes))
            for bc, chunks, vec, warps in TOKENS_SWEEP:
                config = {"BLOCK_C": bc, "CHUNKS": chunks, "VEC": vec, "num_warps": warps}
                tag = f"c{bc} x{chunks} v{vec} w{warps}"
                cases.append((f"tokens^T {tag}", shape,
                              lambda x, c=config: T.quantize_tokens_transposed(x, tok, config=c), bf16(shape), nbytes))
                cases.append((f"requant {tag}", shape,
                              lambda q, c=config: T.requantize_tokens_transposed(q, tok, config=c),
                              saved(shape), requant_bytes))
                cases.append((f"requant pow2 {tag}", shape,
                              lambda q, c=config: T.requantize_tokens_transposed(q, tok_pow2, config=c),
                              saved(shape, act_pow2), requant_bytes))
            for warps in BLOCKS_REQUANT_SWEEP:
                config = {"VEC": 4, "num_warps": warps}
                cases.append((f"requant blocks w{warps}", shape,
                              lambda q, c=config: T.requantize_blocks_transposed(q, blk, config=c), saved(shape),
                              blocks_bytes))
            if gluon:
                for lanes, ring in itertools.product((8, 4), (False, True)):
                    cases.append((f"requant blocks gluon t{lanes}{' ring' if ring else ''}", shape,
                                  lambda q, t=lanes, r=ring: gluon_requant.requantize_blocks_transposed(q, blk, t, r),
                                  saved(shape), blocks_bytes))
            for block_m, block_c, warps in DUAL_SWEEP:
                config = {"BLOCK_M": block_m, "BLOCK_C": block_c, "num_warps": warps}
                cases.append((f"dy fused m{block_m} c{block_c} w{warps}", shape,
                              lambda x, c=config: T.quantize_rows_and_tokens_transposed(x, act, tok, config=c),
                              bf16(shape), dual_bytes))
        cases.append(("per-tensor (2 passes)", shape, lambda x: Q.quantize(x, ten), bf16(shape), 3 * m * k))
    for m, h in NORM_SHAPES:
        nbytes = 2 * m * h + 2 * h + activation_bytes(m, h)  # x and w read, y written, its FP8 bytes and scales
        cases.append(("rmsnorm+1x128 fused", (m, h), lambda x, w: F.rms_norm_quantize(x, w, 1e-5, act),
                      norm_inputs((m, h)), nbytes))
        cases.append(("rmsnorm+1x128 2 kernels", (m, h), unfused_norm, norm_inputs((m, h)), nbytes))
    for m, k in MLP_SHAPES:
        nbytes = 2 * m * k + activation_bytes(m, k)  # gate and up read, h written, its FP8 bytes and scales
        cases.append(("silu*up+1x128 fused", (m, k), lambda g, u: F.silu_mul_quantize(g, u, act),
                      bf16((m, k), (m, k)), nbytes))
        cases.append(("silu*up+1x128 unfused", (m, k), unfused_silu, bf16((m, k), (m, k)), nbytes))
        if sweep:
            for bm, groups, warps in SILU_SWEEP:
                config = {"BLOCK_M": bm, "GROUPS": groups, "num_warps": warps}
                cases.append((f"silu*up bm{bm} g{groups} w{warps}", (m, k),
                              lambda g, u, c=config: TF.silu_mul_quantize(g, u, act, config=c),
                              bf16((m, k), (m, k)), nbytes))
    for n, k in WEIGHT_SHAPES:
        nbytes = weight_bytes(n, k)
        cases.append(("128x128 weight", (n, k), lambda w: Q.quantize_blocks(w, blk), bf16((n, k)), nbytes))
        # with Q(W)^T written in the same pass, as every training step after a weight update quantizes
        cases.append(("128x128 weight + ^T", (n, k),
                      lambda w: Q.quantize_blocks(w, blk, out_t=Q.block_buffers(w.shape[1], w.shape[0], blk, w.device)),
                      bf16((n, k)), 2 * nbytes - 2 * n * k))
    return cases


def kernel_names(sweep: bool = False) -> list[str]:
    """The kernels' names, in the order they are timed, each once (`run`'s `only` picks among them)."""
    return list(dict.fromkeys(kernel for kernel, *_ in _cases(sweep)))


def run(*, reps: int = 40, warmup: int = 5, sweep: bool = False, only: tuple[str, ...] = (),
        copy_gbps: float | None = None, on_row: Callable[[dict, list[dict]], None] | None = None) -> list[dict]:
    """Measure every case (those whose name contains one of `only`, if given): a row each, as in the table.
    `copy_gbps`: the device copy's rate, measured here when not given; `on_row(row, rows)` runs as each row is
    measured, with the rows so far (`precision bench quant` prints the row and rewrites its JSON then, so a run
    cut short keeps what it measured).
    Each kernel is timed in turns with a copy of as many bytes, the copy before it on every call: one repetition
    after another, a kernel runs behind itself, and what a kernel leaves behind moves the next one's time. On an
    H100 the persistent cp.async ring ran 74-81% of copy behind itself against 83-88% behind a copy or the
    one-tile program, with a 200 us or a 2 ms gap alike (fifty-third session, BENCHMARKS.md). The re-quantizers
    (`in_backward`) are timed again behind the FP8 dgrad GEMM (`dgrad`), their context in a backward, as
    ``pct_copy_behind_dgrad``: behind a BF16 one the H100's ring ran 88.6-93.5% of copy (fifty-fourth session)."""
    if not torch.cuda.is_available():
        raise RuntimeError("the quantizer benchmark needs a CUDA GPU")
    copy_gbps = copy_gbps or copy_bandwidth()
    rows = []
    for kernel, shape, fn, make_inputs, nbytes in _cases(sweep):
        if only and not any(part in kernel for part in only):
            continue
        sets = rotation(lambda: (make_inputs(), copy_buffers(nbytes)), 2 * nbytes)
        ms = _ms_behind(lambda buffers: _copy(*buffers), fn, sets, warmup=warmup, reps=reps)
        del sets
        rate = gbps(nbytes, ms)
        rows.append({"kernel": kernel, "shape": list(shape), "ms": round(ms, 4), "gbps": round(rate, 1),
                     "pct_copy": round(100 * rate / copy_gbps, 1), "bytes": nbytes})
        if in_backward(kernel):
            dx = dgrad(*shape)
            sets = rotation(lambda: (make_inputs(), None), nbytes)
            behind_ms = _ms_behind(lambda _: dx(), fn, sets, warmup=warmup, reps=reps)
            del sets, dx
            rows[-1]["pct_copy_behind_dgrad"] = round(100 * gbps(nbytes, behind_ms) / copy_gbps, 1)
        if on_row:
            on_row(rows[-1], rows)
    return rows


def _ms_behind(before: Callable, fn: Callable, sets: list[tuple], *, warmup: int, reps: int) -> float:
    """Median ms of `fn(*inputs)` over `sets` of (inputs, context), in turns with `before(context)` run ahead of it
    on every call (`run`: a copy of its bytes, or the dgrad)."""
    _, times = time_cuda_turns([lambda _, context: before(context), lambda inputs, _: fn(*inputs)], warmup=warmup,
                               reps=reps, inputs_rotation=sets)
    return median(times)


def table_header(env: dict, copy_gbps: float) -> str:
    """The card, versions and copy rate (`env` as `bench.gemm.environment` gives it), then the columns."""
    return (f"{env['device']}  torch {env['torch']}  triton {env['triton']}  "
            f"device copy {copy_gbps:.0f} GB/s (read+write)\n"
            f"{'kernel':<36} {'shape':>13} {'ms':>8} {'GB/s':>7} {'% copy':>7} {'% dgrad':>8}")


def table_row(row: dict) -> str:
    """`row`'s line; ``% dgrad`` (`run`: the same kernel behind its dgrad GEMM) blank where not timed."""
    shape = "x".join(str(s) for s in row["shape"])
    behind = row.get("pct_copy_behind_dgrad")
    return (f"{row['kernel']:<36} {shape:>13} {row['ms']:>8.3f} {row['gbps']:>7.0f} {row['pct_copy']:>6.1f}%"
            + (f" {behind:>7.1f}%" if behind is not None else ""))


def summary(rows: list[dict]) -> list[str]:
    """A line per kernel with a target (`TARGETS`) among `rows`: on how many shapes it reaches it, and its range;
    where its same-size copy ran (`same_bytes_copy`), that copy's range and the kernel's share of it."""
    lines = []
    for kernel, target in TARGETS.items():
        pct = {tuple(r["shape"]): r["pct_copy"] for r in rows if r["kernel"] == kernel}
        if not pct:
            continue
        line = (f"{kernel}: >= {target:.0f}% of copy on {sum(p >= target for p in pct.values())} of {len(pct)} "
                f"shapes ({min(pct.values()):.1f}-{max(pct.values()):.1f}%)")
        ceiling = {tuple(r["shape"]): r["pct_copy"] for r in rows
                   if r["kernel"] == same_bytes_copy(kernel) and tuple(r["shape"]) in pct}
        if ceiling:
            share = [100 * pct[shape] / ceiling[shape] for shape in ceiling]
            line += (f"; a copy of the same bytes {min(ceiling.values()):.1f}-{max(ceiling.values()):.1f}%, "
                     f"the kernel {min(share):.1f}-{max(share):.1f}% of it")
        behind = [r["pct_copy_behind_dgrad"] for r in rows if r["kernel"] == kernel and "pct_copy_behind_dgrad" in r]
        if behind:
            line += (f"; behind its dgrad on {sum(p >= target for p in behind)} of {len(behind)} shapes "
                     f"({min(behind):.1f}-{max(behind):.1f}%)")
        lines.append(line)
    return lines
