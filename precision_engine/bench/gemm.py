"""`precision bench kernels`: FP8 GEMMs alone (operands already quantized) against BF16 in the same run.

Shapes are the projection GEMMs of Llama-3.1-8B and Qwen3-8B, (N, K) = (out, in) features, at training sizes
(M = 8192, 16384 tokens) and decode sizes (M = 1, 16, 64). Every timed call gets the next of several freshly
drawn input sets, together larger than the L2, so decode numbers measure HBM, not the cache. Decode sizes are
timed as CUDA-graph replays (see `time_graphed`), training sizes eagerly; a row's kernels take turns call by call
(`timed_turns`), since a card at its power cap moves its clock within a second.

Kernels: ours (cuBLAS; `cublas_pinned`, cuBLAS with one algorithm pinned per shape, batch-invariant, its rows
under 16 and its decode sizes on Hopper on our one-segment launches (same bits), a note where its extension
does not build; `triton`, the Triton kernel by name, which on Hopper with Triton 3.6 is `gluon_gemm` above
decode sizes and `gluon_chain` or Gluon's whole tiles at them; DeepGEMM where installed)
and, where it runs (`torchao_ref.unavailable`),
torchao's Triton GEMM (`torchao_triton`) on operands its own quantizers made; its cuBLAS path is the cuBLAS row.
"""

from __future__ import annotations

import dataclasses
import platform
import time
from datetime import datetime, timezone

import torch

from precision_engine.bench.timing import median, rotation, time_cuda_turns

# (N, K): q/o, k/v, Llama MLP up|gate / down, Qwen3 MLP up|gate / down, Llama fused qkv, fused gate+up
SHAPES_8B: tuple[tuple[int, int], ...] = (
    (4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (12288, 4096), (4096, 12288), (6144, 4096),
    (28672, 4096),
)
TRAIN_M = (8192, 16384)
GRAPHED = "/graph"  # a pass name's suffix (`bench linear`, `bench block`): the pass timed as CUDA-graph replays
DECODE_M = (1, 16, 64)
QUICK_SHAPES = ((4096, 4096), (14336, 4096))
MLP_FEATURES = (14336, 28672, 12288)  # the 8B MLPs' intermediate sizes (Llama up, fused gate+up; Qwen3 up)
DECODE_TARGET = 1.5  # issue 12: the whole linear's decode forward, every shape, M = 1..64


def target(n: int, k: int, m: int, pass_: str) -> float:
    """Issue 12's target for the batch-invariant linear's ratio against BF16 on one row: 1.5x for the decode
    forward (M up to 64), 1.45x for the forward and the training step, 1.6x for the step on the MLP shapes."""
    if m <= DECODE_M[-1]:
        return DECODE_TARGET
    if pass_.removesuffix(GRAPHED) == "fwd+bwd" and (n in MLP_FEATURES or k in MLP_FEATURES):
        return 1.6
    return 1.45


def environment() -> dict:
    """Card and software versions recorded with every result."""
    import triton

    from precision_engine.bench import torchao_ref

    env = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "torchao": torchao_ref.version(),
        # AUTO launches DeepGEMM in place of cuBLAS where it is installed (numerics.gemm): fp8_bi's GEMMs differ
        "deep_gemm": deep_gemm_version(),
    }
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
        env["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
    return env


def deep_gemm_version() -> str | None:
    """The installed DeepGEMM's version (None: none with the API AUTO uses)."""
    from precision_engine.numerics.gemm import deep_gemm_available

    if not deep_gemm_available():
        return None
    import deep_gemm

    return getattr(deep_gemm, "__version__", "unknown")


def deep_gemm_note() -> str | None:
    """The line a bench table ends with where AUTO's GEMMs ran on DeepGEMM (a Hopper GPU with DeepGEMM), since the
    fp8_bi and policy rows then time its launches, not cuBLAS's."""
    from precision_engine.numerics.formats import Kernel
    from precision_engine.numerics.gemm import device_info

    version = deep_gemm_version()
    if version is None or not torch.cuda.is_available() or not device_info(torch.device("cuda")).runs(Kernel.DEEP_GEMM):
        return None
    return (f"DeepGEMM {version} is installed: kernel auto (fp8_bi, the policies' default) ran the forward above "
            f"64 rows and dgrad on it, with cuBLAS's bits (README, DeepGEMM)")


def capture_graph(fn, sets: list[tuple]) -> torch.cuda.CUDAGraph:
    """A CUDA graph of one call of fn(*set) per input set, captured after three eager rounds on a side stream
    (compile, autotune and allocate outside the capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            for s in sets:
                fn(*s)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for s in sets:
            fn(*s)
    return graph


def time_graphed(fn, sets: list[tuple], *, warmup: int, reps: int) -> float:
    """Median ms per call of fn(*set), run as CUDA-graph replays of one call per input set (`capture_graph`).

    Decode-sized kernels take less time than their host-side launch, so eager timing measures Python, not the
    GPU. Rollout engines (SGLang) run decode as CUDA graphs; BF16 and FP8 are both timed this way here.
    """
    return timed_turns([fn], sets, graphed=True, warmup=warmup, reps=reps)[0]


def timed(fn, sets: list[tuple], *, graphed: bool, warmup: int, reps: int) -> float:
    """Median ms per call: graph replays for decode sizes, eager CUDA-event timing otherwise."""
    return timed_turns([fn], sets, graphed=graphed, warmup=warmup, reps=reps)[0]


def timed_turns(fns, sets: list[tuple], *, graphed: bool, warmup: int, reps: int) -> list[float]:
    """Median ms per call of each of `fns`, taking turns call by call (`timing.time_cuda_turns`): as graph
    replays (each fn's graph captured before any is timed), or eagerly."""
    if graphed:
        graphs = [capture_graph(fn, sets) for fn in fns]
        times = time_cuda_turns([graph.replay for graph in graphs], warmup=warmup, reps=reps)
        return [median(own) / len(sets) for own in times]
    return [median(own) for own in time_cuda_turns(fns, warmup=warmup, reps=reps, inputs_rotation=sets)]


@dataclasses.dataclass
class Turns:
    """What `timed_where_they_run` measured."""

    ms: dict[str, float]  # the median ms of each call that ran, in the calls' order
    errors: dict[str, BaseException]  # the error of each call left out
    first_call_s: dict[str, float]  # each first call's wall seconds (compilation, autotuning), failed ones too


def timed_where_they_run(calls: dict, sets: list[tuple], *, graphed: bool, warmup: int, reps: int,
                         refused: tuple[type[BaseException], ...] = (Exception,), baseline: str | None = "bf16"
                         ) -> Turns:
    """Each of `calls` (name -> fn) timed in turns call by call (`timed_turns`), after a first call each. A call
    that raises one of `refused`, at its first call or while they take turns (a graph that cannot be captured), is
    left out with its error and the others are timed again without it: one failing must not lose the others. The
    `baseline` failing raises its error: every ratio needs it (None: none is, and every call may be left out)."""
    named = {name: _Named(name, fn, refused) for name, fn in calls.items()}
    turns = Turns({}, {}, {})

    def leave_out(failed: _Failed) -> None:
        if failed.name == baseline:
            raise failed.__cause__
        turns.errors[failed.name] = failed.__cause__

    for name, fn in named.items():
        start = time.perf_counter()
        try:
            fn(*sets[0])
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        except _Failed as failed:
            leave_out(failed)
        turns.first_call_s[name] = time.perf_counter() - start
    while True:
        running = [name for name in named if name not in turns.errors]
        try:
            times = timed_turns([named[name] for name in running], sets, graphed=graphed, warmup=warmup, reps=reps)
        except _Failed as failed:
            leave_out(failed)
            continue
        turns.ms = dict(zip(running, times))
        return turns


class _Failed(Exception):
    """A call taking turns raised: names it, the error as its cause."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _Named:
    """A call whose errors of the `refused` types name it (`_Failed`)."""

    def __init__(self, name: str, fn, refused: tuple[type[BaseException], ...]) -> None:
        self.name, self.fn, self.refused = name, fn, refused

    def __call__(self, *args) -> None:
        try:
            self.fn(*args)
        except self.refused as err:
            raise _Failed(self.name) from err


def bench_kernels(*, quick: bool = False, reps: int = 50, warmup: int = 10) -> list[dict]:
    """One row per (shape, M): median ms of BF16 and of each FP8 kernel, timed in turns call by call
    (`timed_where_they_run`), and their ratios (BF16 ms / FP8 ms); a kernel whose first call fails leaves its note
    instead, and `torchao_note` says why torchao's GEMM has no numbers."""
    from precision_engine.bench import torchao_ref
    from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
    from precision_engine.numerics.gemm import deep_gemm_available, fp8_gemm
    from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

    act, wfmt = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
    kernels = [Kernel.CUBLAS, Kernel.CUBLAS_PINNED, Kernel.TRITON]
    kernels += [Kernel.DEEP_GEMM] if deep_gemm_available() else []
    torchao_note = torchao_ref.unavailable()
    shapes = QUICK_SHAPES if quick else SHAPES_8B
    ms_list = (TRAIN_M[:1] + DECODE_M[:1]) if quick else (TRAIN_M + DECODE_M)
    rows = []
    for n, k in shapes:
        for m in ms_list:

            def make():
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
                ao = torchao_ref.gemm_operands(x, w) if torchao_note is None else ()
                return x, w, quantize_rows_1xG(x, act), quantize_blocks(w, wfmt), ao

            sets = rotation(make, (m + n) * k * (3 if torchao_note else 4))
            graphed = m <= DECODE_M[-1]
            row = {"n": n, "k": k, "m": m, "graphed": graphed}
            calls = {"bf16": lambda x, w, xq, wq, ao: torch.mm(x, w.t())}
            for kern in kernels:
                def call(x, w, xq, wq, ao, kern=kern):
                    return fp8_gemm(xq, wq, kernel=kern, batch_invariant=False)

                calls[kern.value] = call
            if torchao_note is None:
                calls["torchao_triton"] = lambda x, w, xq, wq, ao: torchao_ref.gemm(*ao)
            else:
                row["torchao_note"] = torchao_note
            # a kernel this GPU cannot run, or whose extension did not build, leaves its note
            turns = timed_where_they_run(calls, sets, graphed=graphed, warmup=warmup, reps=reps)
            for name, err in turns.errors.items():
                row["torchao_note" if name == "torchao_triton" else f"{name}_note"] = failure_note(err)
            for name, ms in turns.ms.items():
                row[f"{name}_ms"] = ms
                if name != "bf16":
                    row[f"{name}_x"] = turns.ms["bf16"] / ms
            row["flops"] = 2 * m * n * k
            rows.append(row)
            del sets
    return rows


def format_table(rows: list[dict], kinds: list[str]) -> str:
    """A fixed-width table: shape, M, BF16 ms, then ms and speed-up for each kind ("-": not run), then the
    distinct notes saying why."""
    head = f"{'N x K':>13} {'M':>6} {'bf16 ms':>9}" + "".join(f" {k + ' ms':>13} {'x':>6}" for k in kinds)
    lines = [f"{r['n']:>6}x{r['k']:<6} {r['m']:>6} {r['bf16_ms']:>9.4f}" + variant_cells(r, kinds, 13) for r in rows]
    return "\n".join([head, *lines, *notes(rows)])


def variant_cells(row: dict, kinds, width: int) -> str:
    """A table line's cells for `kinds`: each one's ms (right-aligned in `width`) and speed-up, "-" if not run."""
    return "".join(f" {row[f'{k}_ms']:>{width}.4f} {row[f'{k}_x']:>6.2f}" if f"{k}_ms" in row
                   else f" {'-':>{width}} {'-':>6}" for k in kinds)


def host_cell(host_ms: float, gpu_ms: float) -> str:
    """An eager call's host ms and GPU ms as "host / GPU", marked "(host-bound)" where issuing it took longer than
    running it."""
    return f"{host_ms:.3f} / {gpu_ms:.3f}" + (" (host-bound)" if host_ms > gpu_ms else "")


def round_range(ratios: list[float]) -> str:
    """A speed-up's range over its rounds, lowest-highest ("1.50-1.62"): `bench linear`'s and `bench block`'s."""
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def error_text(err: BaseException) -> str:
    """A failed step's error as a row's `error` keeps it: its type and its whole message."""
    return f"{type(err).__name__}: {err}"


def failure_note(err: BaseException) -> str:
    """The `<kind>_note` a call that failed leaves in its row: the error's type and its first 200 characters."""
    return f"{type(err).__name__}: {str(err)[:200]}"


def notes(rows: list[dict]) -> list[str]:
    """Each distinct `<kind>_note` of the rows, once, as "note (kind): text"."""
    seen = dict.fromkeys((key[: -len("_note")], r[key]) for r in rows for key in r if key.endswith("_note"))
    return [f"note ({kind}): {text}" for kind, text in seen]
