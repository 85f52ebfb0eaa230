"""`precision bench ceiling`: how far FP8 linears could get ahead of BF16 on this device, measured in one run.

Issue 12 asks the FP8 linear for >= 1.45x BF16 (>= 1.6x fwd+bwd on the MLP shapes). How far any FP8 linear
can get is bounded by the device's fastest GEMMs, not by ours. So for each (N, K) and token count M, this times
the three GEMMs of a training step in the same run:
- in BF16, with nn.Linear's own layouts;
- in FP8 with one scale per tensor and fast accumulation (`torch._scaled_mm(use_fast_accum=True)`: cuBLAS's
  fastest FP8 GEMM, with no block scales to apply and no promotion to FP32 along K);
- in FP8 with the Jet-RL scales (`blocks`): 1x128 groups times 128x128 weight blocks for fprop and dgrad, 1x128
  times 1x128 groups along tokens for wgrad, on cuBLAS's block-scaled GEMM (`gemm.fp8_gemm`, kernel cublas). No
  faster cuBLAS configuration is known here: on the H200 (seventeenth session) none of the other cuBLASLt
  configurations tried (every algorithm the heuristic offers; every tile, stage count and cluster shape
  cublasLtMatmulAlgoCheck accepts at custom option 0) beat the heuristic's first pick, nor did our Gluon GEMM;
- on the same operands on DeepGEMM (`deep_gemm`), where it runs (installed, on Hopper; elsewhere `deep_gemm_note`
  says why): fprop and dgrad through `gemm.fp8_gemm` (kernel deep_gemm, BF16 out), faster than cuBLAS on the H200
  (1.66-1.92x BF16 against 1.38-1.72x, eighteenth session); wgrad on its 1x128 x 1x128 kernel (level with cuBLAS
  there), which writes FP32 only and accumulates (D = C + A B^T) into an FP32 buffer allocated once per input
  set, as a trainer with FP32 main grads accumulates dW. Zeroing that buffer and casting it to BF16, which a BF16
  dW adds (9-14% more on the H200), is not counted.
It also measures the device's copy bandwidth, and our FP8 linear's own ratios (`bench linear`'s fp8_cublas and
fp8_bi) on the same shape, so each row reads: achieved, ceiling, target. It derives two ceilings per pass:

  GEMMs only        BF16 GEMM ms / FP8 GEMM ms, with no quantization at all. A target above this asks the
                    FP8 linear's block-scaled GEMMs to beat cuBLAS's per-tensor FP8 GEMM, which has less work
                    (no scales to apply per block): out of reach unless some kernel beats cuBLAS there. Each
                    GEMM's TFLOP/s is kept too, to compare with the tensor cores' peak.
  with quantizers   BF16 ms / (FP8 GEMM ms + the fewest bytes the Jet-RL dataflow's quantizers must move, at
                    copy bandwidth). This assumes quantization does not overlap the GEMMs.
Each is derived from the per-tensor GEMMs (the card's FP8 ceiling), from each block-scaled family's (`blocks_`,
`deep_gemm_` keys), and from the fastest block-scaled GEMM per GEMM of the pass (`fastest_` keys; `fastest_kinds`
names each GEMM's winner): the ceiling of any linear built on the block-scaled GEMMs known here, ours and
torchao's alike. A target above it is out of reach for such a linear: only a block-scaled GEMM faster than
those measured would reach it. The verdict judges by that ceiling with the quantizers' bytes where a block-scaled
family ran, else by the per-tensor GEMMs-only one.

GEMMs, for x [M, K], W [N, K] and dy [M, N]: fprop x W^T; dgrad dy W; wgrad dy^T x.
The fewest bytes (`quantizer_bytes`):
- forward (rollout's: Q(W) cached): read x, write Q(x) with its 1x128 scales;
- the step (W re-quantized, as after every optimizer step), which adds:
  - read W; write Q(W), Q(W)^T and their block scales;
  - read dy once; write both of its layouts;
  - read Q(x); write it re-quantized along tokens.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import torch

from precision_engine.bench.gemm import (GRAPHED, QUICK_SHAPES, SHAPES_8B, TRAIN_M, failure_note, target,
                                        timed_where_they_run)
from precision_engine.bench.quant import activation_bytes, grad_output_bytes, requantize_bytes, weight_bytes
from precision_engine.bench.timing import rotation
from precision_engine.errors import UnsupportedError
from precision_engine.numerics.capabilities import Gemm
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel

GEMMS = ("fprop", "dgrad", "wgrad")
BLOCK_SCALED = {"blocks": "cuBLAS", "deep_gemm": "DeepGEMM"}  # the Jet-RL block scales: kind -> whose GEMMs
FP8_KINDS = ("fp8", *BLOCK_SCALED)  # per-tensor with fast accumulation first
BLOCK = 128
ACHIEVED = ("fp8_cublas", "fp8_bi")  # our linear's variants timed beside the ceilings (bench linear's)


def quantizer_bytes(n: int, k: int, m: int) -> dict[str, int]:
    """The fewest bytes the quantizers of one FP8 linear must move (read + write), per pass (module doc)."""
    act = activation_bytes(m, k)
    weight = weight_bytes(n, k) + n * k + 4 * -(-n // BLOCK) * -(-k // BLOCK)  # and Q(W)^T with its scales
    return {"fwd": act, "fwd+bwd": act + weight + grad_output_bytes(m, n) + requantize_bytes(m, k)}


def problems(n: int, k: int, m: int) -> dict[str, tuple[int, int, int]]:
    """Each GEMM of the step as (rows, columns, reduction): fprop [M, N] over K, dgrad [M, K] over N, wgrad
    [N, K] over M."""
    return {"fprop": (m, n, k), "dgrad": (m, k, n), "wgrad": (n, k, m)}


_BF16_PRODUCTS = {  # nn.Linear's product per GEMM, on its operands p, q (`_bf16_shapes`)
    "fprop": lambda p, q: torch.mm(p, q.t()),  # x W^T
    "dgrad": torch.mm,  # dy W
    "wgrad": lambda p, q: torch.mm(p.t(), q),  # dy^T x
}


def _bf16_shapes(gemm: str, n: int, k: int, m: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The shapes of nn.Linear's operands p, q for one GEMM: x [M, K], W [N, K], dy [M, N]."""
    return {"fprop": ((m, k), (n, k)), "dgrad": ((m, n), (n, k)), "wgrad": ((m, n), (m, k))}[gemm]


def ceilings(row: dict) -> dict:
    """The ceilings of `row` (its `bf16_<gemm>_ms`, `<kind>_<gemm>_ms` per FP8_KINDS, `copy_gbps`,
    `<pass>_bytes`) per pass, each with the issue's target and whether it is within reach: of the card's per-tensor
    FP8 GEMMs (`reachable`: their GEMMs-only ratio), of each block-scaled family's (`blocks_reachable`,
    `deep_gemm_reachable`) and of the fastest block-scaled GEMM per GEMM (`fastest_reachable`): with the
    quantizers' bytes too, what a linear on those GEMMs can reach at best."""
    out = {}
    for pass_, gemms in (("fwd", GEMMS[:1]), ("fwd+bwd", GEMMS)):
        bf16 = sum(row[f"bf16_{g}_ms"] for g in gemms)
        quant_ms = row[f"{pass_}_bytes"] / (row["copy_gbps"] * 1e6)  # GB/s = 1e6 bytes per ms
        cell = {"target": target(row["n"], row["k"], row["m"], pass_)}
        for kind in FP8_KINDS:
            if all(f"{kind}_{g}_ms" in row for g in gemms):
                prefix = "" if kind == "fp8" else f"{kind}_"
                cell |= _ratios(prefix, bf16, sum(row[f"{kind}_{g}_ms"] for g in gemms), quant_ms)
        cell |= _fastest_block_scaled(row, gemms, bf16, quant_ms)
        if "gemm_x" in cell:
            cell["reachable"] = cell["gemm_x"] >= cell["target"]
        for kind in (*BLOCK_SCALED, "fastest"):
            if f"{kind}_with_quant_x" in cell:
                cell[f"{kind}_reachable"] = cell[f"{kind}_with_quant_x"] >= cell["target"]
        out[pass_] = cell
    return out


def _ratios(prefix: str, bf16_ms: float, fp8_ms: float, quant_ms: float) -> dict[str, float]:
    """A pass's two ceilings (module doc) from its BF16 and FP8 GEMM ms."""
    return {f"{prefix}gemm_x": bf16_ms / fp8_ms, f"{prefix}with_quant_x": bf16_ms / (fp8_ms + quant_ms)}


def _fastest_block_scaled(row: dict, gemms: Sequence[str], bf16_ms: float, quant_ms: float) -> dict:
    """The `fastest_` ceilings: per GEMM the block-scaled family that ran it fastest (`fastest_kinds`), among
    those measured for the pass (`fastest_among`, which the verdict names). Empty where a GEMM ran on none."""
    ran = {g: [kind for kind in BLOCK_SCALED if f"{kind}_{g}_ms" in row] for g in gemms}
    if not all(ran.values()):
        return {}
    winners = {g: min(kinds, key=lambda kind: row[f"{kind}_{g}_ms"]) for g, kinds in ran.items()}
    among = [kind for kind in BLOCK_SCALED if any(kind in kinds for kinds in ran.values())]
    fp8_ms = sum(row[f"{kind}_{g}_ms"] for g, kind in winners.items())
    return {**_ratios("fastest_", bf16_ms, fp8_ms, quant_ms), "fastest_kinds": winners, "fastest_among": among}


def _deep_gemm_note(device: str) -> str | None:
    """Why the deep_gemm family is not timed on `device` (None where it is): the package does not import, or the
    device is no Hopper GPU (`DeviceInfo.runs` decides; its SM100 kernels would round our scales to UE8M0)."""
    from precision_engine.numerics.gemm import device_info

    info = device_info(torch.device(device))
    if info.runs(Kernel.DEEP_GEMM):
        return None
    if dataclasses.replace(info, deep_gemm=True).runs(Kernel.DEEP_GEMM):
        return "not timed: the deep_gemm package (DeepGEMM 2.x, with fp8_gemm_nt) does not import here"
    where = info.type if info.capability is None else f"compute capability {info.capability[0]}.{info.capability[1]}"
    return f"not timed: DeepGEMM's SM90 kernels need a Hopper GPU (compute capability 9.0), this device: {where}"


def _gemm_timers(gemm: str, n: int, k: int, m: int, device: str) -> tuple[Callable, dict[str, Callable], int]:
    """(make one input set, {kind: its GEMM on a set} for bf16 and FP8_KINDS, bytes of a set) for one GEMM of the
    step: BF16 on nn.Linear's operands, FP8 on K-major operands of the same problem (what cuBLAS takes), the
    block-scaled ones quantized from random values in the Jet-RL layouts. Off CUDA the block-scaled GEMM runs
    emulated (the wiring's test). deep_gemm only where DeepGEMM runs (`_deep_gemm_note`); its wgrad set carries
    the FP32 buffer it accumulates into."""
    from precision_engine.numerics.gemm import device_info, fp8_gemm
    from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

    rows, cols, red = problems(n, k, m)[gemm]
    p_shape, q_shape = _bf16_shapes(gemm, n, k, m)
    bf16_product = _BF16_PRODUCTS[gemm]
    one = torch.ones((), device=device)
    groups, blocks = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
    kernel = Kernel.CUBLAS if torch.device(device).type == "cuda" else Kernel.EMULATED
    deep_gemm_runs = device_info(torch.device(device)).runs(Kernel.DEEP_GEMM)
    accumulates = deep_gemm_runs and gemm == "wgrad"

    def make():
        p = torch.randn(p_shape, device=device, dtype=torch.bfloat16)
        q = torch.randn(q_shape, device=device, dtype=torch.bfloat16)
        a8 = torch.randn(rows, red, device=device).to(torch.float8_e4m3fn)
        b8 = torch.randn(cols, red, device=device).to(torch.float8_e4m3fn)
        a_blocks = quantize_rows_1xG(torch.randn(rows, red, device=device), groups)
        b_values = torch.randn(cols, red, device=device)
        b_blocks = quantize_rows_1xG(b_values, groups) if gemm == "wgrad" else quantize_blocks(b_values, blocks)
        grad = torch.zeros(rows, cols, device=device) if accumulates else None
        return p, q, a8, b8, a_blocks, b_blocks, grad

    timers = {
        "bf16": lambda p, q, *_: bf16_product(p, q),
        "fp8": lambda p, q, a8, b8, *_: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                                         out_dtype=torch.bfloat16, use_fast_accum=True),
        "blocks": lambda *s: fp8_gemm(s[4], s[5], kernel=kernel, gemm=Gemm(gemm), batch_invariant=False),
    }
    if deep_gemm_runs:
        timers["deep_gemm"] = _deep_gemm_wgrad if gemm == "wgrad" else (
            lambda *s: fp8_gemm(s[4], s[5], kernel=Kernel.DEEP_GEMM, gemm=Gemm(gemm), batch_invariant=False))
    return make, timers, 4 * (rows + cols) * red + (4 * rows * cols if accumulates else 0)


def _deep_gemm_wgrad(*s) -> torch.Tensor:
    """DeepGEMM's wgrad on a set: its 1x128 x 1x128 kernel accumulates into the set's FP32 dW (D = C + A B^T,
    C = D), the only output it writes (module doc)."""
    import deep_gemm

    a, b, grad = s[4:7]
    deep_gemm.fp8_gemm_nt((a.data, a.scale), (b.data, b.scale), grad, c=grad, recipe=(1, 1, 128))
    return grad


def bench_ceiling(*, quick: bool = False, reps: int = 30, warmup: int = 5,
                  shapes: Sequence[tuple[int, int]] | None = None, ms: Sequence[int] | None = None,
                  device: str = "cuda", on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """One row per (shape, M): each GEMM's BF16 and FP8 ms, the copy bandwidth, the quantizer bytes, the
    ceilings (`ceilings`) under "ceilings", and `<kind>_note` where an FP8 family did not run. `shapes` (N, K) and
    `ms` override the 8B lists (or --quick's); `device` cpu runs the same loop at toy sizes (tests: the wiring, not
    a measurement)."""
    from precision_engine.bench.linear import bench_linear
    from precision_engine.bench.quant import copy_bandwidth

    bandwidth = copy_bandwidth(1 << 30 if device == "cuda" else 1 << 20, device=device)
    deep_gemm_note = _deep_gemm_note(device)
    rows = []
    for n, k in shapes or (QUICK_SHAPES if quick else SHAPES_8B):
        for m in ms or (TRAIN_M[:1] if quick else TRAIN_M):
            row = {"n": n, "k": k, "m": m, "copy_gbps": bandwidth}
            if deep_gemm_note:
                row["deep_gemm_note"] = deep_gemm_note
            for gemm in GEMMS:
                make, timers, nbytes = _gemm_timers(gemm, n, k, m, device)
                sets = rotation(make, nbytes)
                flop = 2 * math.prod(problems(n, k, m)[gemm])
                turns = timed_where_they_run(timers, sets, graphed=False, warmup=warmup, reps=reps,
                                             refused=(UnsupportedError, RuntimeError))
                for kind, err in turns.errors.items():  # an FP8 GEMM this GPU lacks
                    row.setdefault(f"{kind}_note", failure_note(err))
                for kind, kind_ms in turns.ms.items():
                    row[f"{kind}_{gemm}_ms"] = kind_ms
                    row[f"{kind}_{gemm}_tflops"] = flop / kind_ms / 1e9
                del sets
            row.update({f"{p}_bytes": b for p, b in quantizer_bytes(n, k, m).items()})
            row["ceilings"] = ceilings(row)
            row["achieved"] = {
                r["pass"]: {v: r[f"{v}_x"] for v in ACHIEVED if f"{v}_x" in r}
                for r in bench_linear(shapes=[(n, k)], ms=[m], variants=("bf16", *ACHIEVED), device=device,
                                      reps=reps, warmup=warmup)
            }
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


def format_row(r: dict) -> str:
    """Per pass: our variants' ratios (eager, then graphed where timed), the ceilings (GEMMs only / with
    quantizers; per-tensor, then the fastest block-scaled) and the target with its verdict; then why an FP8 family
    did not run, where one did not."""
    cells = []
    for pass_, c in r["ceilings"].items():
        ours = "; ".join(f"{how}{', '.join(f'{v} {x:.2f}x' for v, x in got.items())}"
                         for how, got in (("", r.get("achieved", {}).get(pass_)),
                                          ("graphed ", r.get("achieved", {}).get(pass_ + GRAPHED))) if got)
        found = [f"ceiling {_pair(c, '')}"] if "gemm_x" in c else []
        if "fastest_gemm_x" in c:
            found.append(f"block-scaled {_pair(c, 'fastest_')}{_block_scaled_detail(c)}")
        cells.append(f"{pass_}: {ours or 'ours -'}; {'; '.join(found) or 'no FP8 GEMM ran'}; "
                     f"target {c['target']:.2f}x {_verdict(c)}")
    notes = "".join(f" | {kind}: {r[f'{kind}_note']}" for kind in FP8_KINDS if f"{kind}_note" in r)
    return f"{r['n']:>6}x{r['k']:<6} {r['m']:>6}  " + " | ".join(cells) + notes


def _pair(cell: dict, prefix: str) -> str:
    """One ceiling as "GEMMs only / with quantizers"."""
    return f"{cell[f'{prefix}gemm_x']:.2f}x / {cell[f'{prefix}with_quant_x']:.2f}x"


def _block_scaled_detail(cell: dict) -> str:
    """Where more than one block-scaled family ran: which won each GEMM, and each family's own ceiling."""
    if len(cell["fastest_among"]) < 2:
        return ""
    winners = ", ".join(f"{g} {BLOCK_SCALED[kind]}" for g, kind in cell["fastest_kinds"].items())
    own = [f"{name} {_pair(cell, f'{kind}_')}" for kind, name in BLOCK_SCALED.items() if f"{kind}_gemm_x" in cell]
    return f" ({'; '.join([winners, *own])})"


def _verdict(cell: dict) -> str:
    """Whether a pass's target is within reach (`_reachable`); out of reach, which GEMMs it is beyond."""
    reachable = _reachable(cell)
    if reachable is None:
        return "not judged"
    if reachable:
        return "within reach"
    if "fastest_reachable" not in cell:
        return "beyond cuBLAS's own FP8"
    per_tensor = "" if cell.get("reachable", True) else "cuBLAS's own FP8 and "
    measured = ", ".join(BLOCK_SCALED[kind] for kind in cell["fastest_among"])
    return f"beyond {per_tensor}the block-scaled GEMMs measured here ({measured})"


def summary(rows: list[dict], variant: str = "fp8_bi") -> list[str]:
    """Issue 12's targets are the batch-invariant linear's: a line per pass (eager, and graphed where timed) that
    counts its rows met, short and beyond the ceiling, short within reach (named, with the ceiling: what is left to
    do) and short but not judged (no FP8 GEMM ran)."""
    lines = []
    for pass_ in dict.fromkeys(p for r in rows for p, got in r["achieved"].items() if variant in got):
        measured = [(r, r["achieved"][pass_][variant], r["ceilings"][pass_.removesuffix(GRAPHED)]) for r in rows
                    if variant in r["achieved"].get(pass_, {})]
        short = [(r, x, cell, _reachable(cell)) for r, x, cell in measured if x < cell["target"]]
        within = "".join(f"; {r['n']}x{r['k']} M = {r['m']} ({x:.2f}x against {_ceiling(cell):.2f}x)"
                         for r, x, cell, reachable in short if reachable)
        counts = {verdict: sum(reachable is verdict for *_, reachable in short) for verdict in (True, False, None)}
        lines.append(f"{variant} {pass_}: target met on {len(measured) - len(short)} of {len(measured)} rows; "
                     f"short and beyond the ceiling on {counts[False]}; short within reach on {counts[True]}{within}"
                     + (f"; short, not judged, on {counts[None]}" if counts[None] else ""))
    return lines


def _reachable(cell: dict) -> bool | None:
    """Whether a pass's target is within reach of the fastest block-scaled GEMMs with the quantizers where they
    ran, else of the per-tensor GEMMs alone; None where no FP8 GEMM ran."""
    return cell.get("fastest_reachable", cell.get("reachable"))


def _ceiling(cell: dict) -> float:
    """The ratio `_reachable` judges by."""
    return cell.get("fastest_with_quant_x", cell.get("gemm_x"))


def format_table(rows: list[dict]) -> str:
    """A line per row: each pass's achieved ratios, its ceilings with GEMMs only / with quantizer bytes (per-tensor
    FP8, then the fastest block-scaled GEMM per GEMM), and the issue's target; then the targets' `summary`."""
    head = (f"{'N x K':>13} {'M':>6}  x BF16, same run; ceilings: GEMMs only / with quantizers at "
            f"{rows[0]['copy_gbps']:.0f} GB/s copy bandwidth; block-scaled: each GEMM on the fastest that ran of "
            f"{' and '.join(BLOCK_SCALED.values())}" if rows else "no rows")
    return "\n".join([head, *map(format_row, rows), *summary(rows)])
