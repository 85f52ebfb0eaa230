"""`precision bench linear`: the whole FP8 linear (quantizers included) against BF16 nn.Linear, same run.

Measured per shape and token count:
  fwd      forward under no_grad with the cached FP8 weight: what rollout pays per call
  fwd+bwd  a training step's share: the weight is marked changed first (so it is re-quantized, as after every
           optimizer step), forward, backward with a fresh random dy, bf16 grads for x and W
Variants: `fp8_cublas` runs all three GEMMs through cuBLAS; `fp8_bi` is the batch-invariant default, its
forward on the Triton kernel (same bits as decode; pinned cuBLAS above decode sizes, same bits, every weight's
K being one segment), dgrad and wgrad on cuBLAS, and where DeepGEMM is installed (the JSON's env says which) its
forward above decode sizes and dgrad on DeepGEMM (cuBLAS's bits, faster: `gemm._deep_gemm_gives_cublas_bits`);
`fp8_bi_pinned` is a policy's `kernel: cublas_pinned`, all three GEMMs on cuBLAS with a pinned algorithm, its
rows under 16 and its decode sizes on Hopper on our one-segment launches (same bits; a note where its extension
does not build); `fp8_bi_wblocks` is `fp8_bi` with `wgrad_input` in 128x128 blocks (x^T blocked in the wgrad, the
fprop's GEMM form: `numerics.linear`), the same forward; `torchao` and `torchao_triton` are torchao's
`Float8BlockwiseLinear` over the same weight (cuBLAS and Triton GEMMs; see `torchao_ref`: it re-quantizes W on
every call, forward included), at training sizes only, where it runs; otherwise `torchao_note` says why.
  host     for the eager passes at training sizes, each variant's host time to issue a call with the GPU kept
           busy (`timing.host_issue_ms`) beside its GPU time (the call timed with a lead long enough for the host
           to issue all of it first): where the host's exceeds the GPU's, that eager row waits on the host
  fwd/graph, fwd+bwd/graph   the same calls captured into a CUDA graph and timed as its replays (GPU only): the
           host's launches and Python drop out, as in a graphed training step (`torch.cuda.graph`,
           `make_graphed_callables`), where the FP8 linear quantizes its weight inside the graph on every call
           (`numerics.linear`); BF16 and torchao are graphed alike, torchao where it can be captured
Decode sizes (M <= 64) are forward only, on the Triton small-M kernel, timed as CUDA-graph replays as a rollout
engine runs decode. Every variant of a row gets the same inputs; one that fails leaves its reason in
`<variant>_note` and the others run. A row's variants take turns call by call (`gemm.timed_where_they_run`),
since a card's clock moves with its load within a second; with `rounds`, that many times, each variant reporting
the median of its rounds and each round's ratio against that round's BF16 (`<variant>_x_rounds`), as `bench block`
does.

Ours run at every shape before torchao's: a fresh machine spends minutes in torchao's first calls (Triton
autotuning, `torchao_ref`), so a run cut short keeps every number of ours. BF16 is timed again beside torchao's
(`bf16_beside_torchao_ms`), and torchao's ratios divide that: a card's clock moves in minutes (BF16's time of one
row moved by up to 9% between passes on an H100), so each ratio is against a baseline timed next to it. Each
variant's first call per row is
timed apart, as `<variant>_warmup_s` (wall seconds: compilation and autotuning happen there); the quantizers that
both torchao variants share are tuned by the first one to run.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import torch
from torch import nn

from precision_engine.bench import torchao_ref
from precision_engine.bench.gemm import (
    DECODE_M,
    GRAPHED,
    QUICK_SHAPES,
    SHAPES_8B,
    TRAIN_M,
    failure_note,
    host_cell,
    notes,
    round_range,
    target,
    timed_where_they_run,
    variant_cells,
)
from precision_engine.bench.timing import host_and_gpu_ms, rotation
from precision_engine.errors import UsageError

# bf16, the baseline of every ratio, always runs
OURS = ("bf16", "fp8_cublas", "fp8_bi", "fp8_bi_pinned", "fp8_bi_wblocks")
VARIANTS = (*OURS, *torchao_ref.VARIANTS)  # in run order, torchao's last
KINDS = VARIANTS[1:]  # the table's columns after bf16
DECODE_VARIANTS = ("bf16", "fp8_bi", "fp8_bi_pinned")  # decode rows time the batch-invariant rollout paths
BF16_BESIDE_TORCHAO = "bf16_beside_torchao"  # BF16 timed again in torchao's sweep: the row key its ratios divide


def choose_variants(names: Sequence[str]) -> tuple[str, ...]:
    """`names` in run order, bf16 added; an unknown name is a UsageError listing the valid ones."""
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise UsageError(f"unknown variant {', '.join(map(repr, unknown))}: choose from {', '.join(VARIANTS)}")
    return tuple(v for v in VARIANTS if v == "bf16" or v in names)


def parse_tokens(text: str) -> tuple[int, ...]:
    """`--tokens` "8192,16384" -> (8192, 16384): positive token counts, sizes up to 64 timed as decode rows; anything
    else is a UsageError that says what was expected."""
    try:
        tokens = tuple(int(part) for part in text.split(","))
    except ValueError:
        tokens = ()
    if not tokens or min(tokens) < 1:
        raise UsageError(f"--tokens {text!r}: expected comma-separated positive token counts, e.g. 8192,16384 "
                         "or 1,16,64")
    return tokens


def parse_shapes(text: str) -> tuple[tuple[int, int], ...]:
    """`--shapes` "6144x4096,28672x4096" -> ((6144, 4096), (28672, 4096)): weights as N x K (out x in features),
    positive multiples of 128 as the block-scaled formats need; anything else is a UsageError that says what was
    expected."""
    try:
        shapes = tuple(tuple(int(side) for side in part.lower().split("x")) for part in text.split(","))
    except ValueError:
        shapes = ()
    if not shapes or any(len(s) != 2 or not _whole_blocks(*s) for s in shapes):
        raise UsageError(f"--shapes {text!r}: expected comma-separated weights N x K (out x in features, multiples "
                         "of 128), e.g. 4096x4096,28672x4096")
    return shapes


def _whole_blocks(n: int, k: int) -> bool:
    """Whether a weight N x K is positive whole 128-wide blocks, as the block-scaled formats need."""
    return min(n, k) >= 128 and n % 128 == 0 and k % 128 == 0


# The parts our decoder runs as one GEMM where a policy gives them the same numerics (`fused_linear`)
FUSED_PARTS = ("self_attn", ("q_proj", "k_proj", "v_proj")), ("mlp", ("gate_proj", "up_proj"))


def model_shapes(spec: str) -> tuple[tuple[tuple[int, int], ...], list[str]]:
    """(the dense GEMM weights N x K that `spec`'s decoder layers run, each once in the model's order; what was
    left out and why) for `--model`: every linear of the layers, then the q/k/v and gate/up stacks our decoder runs
    as one GEMM where every part's rows are whole 128-row blocks (`fused_linear.shares_one_gemm`). Embeddings and
    lm_head (BF16 in every shipped policy) are not linears of the layers; MoE experts (grouped GEMMs, not one
    linear) and a weight whose sides are not multiples of 128 (`--shapes` refuses it) are left out, and said so."""
    from precision_engine.models.inventory import ModuleKind
    from precision_engine.models.loader import load_inventory

    inventory = load_inventory(spec)
    weights = {m.name: m.weight_shape for m in inventory.of_kind(ModuleKind.LINEAR) if ".layers." in m.name}
    found = dict.fromkeys(tuple(shape) for shape in weights.values())
    for name in weights:
        owner, _, leaf = name.rpartition(".")
        for sublayer, parts in FUSED_PARTS:
            shapes = [weights.get(f"{owner}.{part}") for part in parts]
            if owner.endswith(f".{sublayer}") and leaf == parts[0] and None not in shapes \
                    and len({k for _, k in shapes}) == 1 and all(n % 128 == 0 for n, _ in shapes):
                found[(sum(n for n, _ in shapes), shapes[0][1])] = None
    kept = tuple(shape for shape in found if _whole_blocks(*shape))
    left_out = [f"{n}x{k} (not whole 128-wide blocks)" for n, k in found if (n, k) not in kept]
    experts = [m for m in inventory.of_kind(ModuleKind.EXPERTS) if ".layers." in m.name]
    if experts:
        left_out.append(f"the MoE experts of {len(experts)} layers ({experts[0].weight_shape[0]} a layer: grouped "
                        "GEMMs, which this benchmark does not time)")
    if not kept:
        raise UsageError(f"--model {spec}: no linear of its decoder layers is in whole 128-wide blocks"
                         + (f" (left out: {', '.join(left_out)})" if left_out else ""))
    return kept, left_out


def _specs():
    from precision_engine.numerics.formats import PRESET_FORMATS as P
    from precision_engine.numerics.formats import Kernel, LinearSpec
    from precision_engine.policy.model import NumericsSpec

    base = dict(weight=P["fp8_block_weight"], input=P["fp8_group_act"], grad_output=P["fp8_group_act"],
                wgrad_operands=P["fp8_group_tokens"])
    return {
        "fp8_cublas": (LinearSpec(**base, kernel=Kernel.CUBLAS), NumericsSpec(batch_invariant=False)),
        "fp8_bi": (LinearSpec(**base), NumericsSpec(batch_invariant=True)),
        "fp8_bi_pinned": (LinearSpec(**base, kernel=Kernel.CUBLAS_PINNED), NumericsSpec(batch_invariant=True)),
        "fp8_bi_wblocks": (LinearSpec(**base, wgrad_input=P["fp8_block_weight"]), NumericsSpec(batch_invariant=True)),
    }


def _train_step(layer: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> None:
    layer.weight.grad = None
    x.grad = None
    torch.autograd.graph.increment_version(layer.weight)  # as after an optimizer step: re-quantize W
    layer(x).backward(dy)


def _forward(layer: nn.Module, x: torch.Tensor, dy: torch.Tensor | None) -> None:
    with torch.no_grad():
        layer(x)


PASSES = {"fwd": _forward, "fwd+bwd": _train_step}
TRAIN_PASSES = (*PASSES, *(name + GRAPHED for name in PASSES))


def _input_sets(n: int, k: int, m: int, names: Sequence[str], *, seed: int, device: str) -> list[tuple]:
    """Input sets (layers by variant over one BF16 Linear, x, dy) rotated past the L2; the same `seed` draws
    the same sets, so variants timed in separate sweeps of the shapes still get the same inputs."""
    from precision_engine.numerics.linear import Fp8Linear

    specs = _specs()
    train = m > DECODE_M[-1]

    def make():
        lin = nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16)
        layers = {"bf16": lin}
        for name in names:
            if name in specs:
                layers[name] = Fp8Linear.from_linear(lin, specs[name][0], numerics=specs[name][1])
            elif name in torchao_ref.VARIANTS:
                layers[name] = torchao_ref.blockwise_linear(lin, use_triton=torchao_ref.VARIANTS[name])
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16, requires_grad=train)
        dy = torch.randn(m, n, device=device, dtype=torch.bfloat16) if train else None
        return layers, x, dy

    torch.manual_seed(seed)
    return rotation(make, (n * k + 2 * m * (n + k)) * 2)


def _measure(row: dict, names: Sequence[str], sets: list[tuple], *, device: str, warmup: int, reps: int,
             rounds: int, beside_torchao: bool = False) -> None:
    """Time the variants `names` (bf16 first) on `row`'s pass, taking turns call by call
    (`gemm.timed_where_they_run`), in `rounds` rounds: each one's first call's wall seconds, then its median ms (the
    median of its rounds' medians) and speed-up against BF16, with several rounds each round's ms
    (`<key>_ms_rounds`) and each round's speed-up against that round's BF16 (`<key>_x_rounds`); where one fails,
    its note instead (bf16 failing fails the bench: every ratio needs it). Beside torchao, BF16 is keyed
    `bf16_beside_torchao`."""
    keys = {name: BF16_BESIDE_TORCHAO if beside_torchao and name == "bf16" else name for name in names}
    step = PASSES[row["pass"].removesuffix(GRAPHED)]
    graphed = torch.device(device).type == "cuda" and (row["m"] <= DECODE_M[-1] or row["pass"].endswith(GRAPHED))
    calls = {name: lambda layers, x, dy, name=name: step(layers[name], x, dy) for name in names}
    running = list(names)

    def note(name: str, err: BaseException) -> None:
        row[f"{keys[name]}_note"] = failure_note(err)
        row.pop(f"{keys[name]}_ms_rounds", None)
        running.remove(name)

    for round_ in range(rounds):
        turns = timed_where_they_run({name: calls[name] for name in running}, sets, graphed=graphed, warmup=warmup,
                                     reps=reps)
        if round_ == 0:
            row.update({f"{keys[name]}_warmup_s": s for name, s in turns.first_call_s.items()})
        for name, err in turns.errors.items():
            note(name, err)
        for name, ms in turns.ms.items():
            row.setdefault(f"{keys[name]}_ms_rounds", []).append(ms)
    if not graphed and row["m"] > DECODE_M[-1]:
        for name in list(running):
            try:
                row[f"{keys[name]}_host_ms"], row[f"{keys[name]}_gpu_ms"] = host_and_gpu_ms(
                    calls[name], sets, warmup=warmup, reps=reps)
            except Exception as err:  # noqa: BLE001 (one variant failing must not lose the others)
                if name == "bf16":
                    raise
                note(name, err)
    baseline = row[f"{keys['bf16']}_ms_rounds"]
    for name in running:
        key = keys[name]
        times = row[f"{key}_ms_rounds"] if rounds > 1 else row.pop(f"{key}_ms_rounds")
        row[f"{key}_ms"] = statistics.median(times)
        if name != "bf16":
            row[f"{key}_x"] = statistics.median(baseline) / row[f"{key}_ms"]
            if rounds > 1:
                row[f"{key}_x_rounds"] = [b / t for b, t in zip(baseline, times)]


def bench_linear(*, quick: bool = False, reps: int = 30, warmup: int = 5,
                 shapes: Sequence[tuple[int, int]] | None = None, ms: Sequence[int] | None = None,
                 variants: Sequence[str] = VARIANTS, rounds: int = 1, device: str = "cuda",
                 on_row: Callable[[dict, list[dict]], None] | None = None) -> list[dict]:
    """One row per (shape, M, pass): BF16 ms, each variant's ms and its speed-up (BF16 ms / variant ms), and each
    variant's first-call seconds.

    `shapes` (N, K) and `ms` (token counts; decode sizes are those <= 64) override the 8B lists (or --quick's);
    `variants` picks the columns that run (`choose_variants`); `rounds` > 1 times a row's variants that many times,
    taking turns, so that a card's clock moving within a row (an H100's SM clock fell from 1980 to 1470-1600 MHz
    under sustained load, fortieth session) moves every variant alike; `on_row(row, rows)` sees a row each time it
    gains numbers (a training row twice where torchao runs: after ours, then after torchao's), with every row so far;
    `device` cpu runs the same loop at toy sizes (tests), decode rows eagerly there."""
    if rounds < 1:
        raise UsageError(f"rounds {rounds}: at least 1")
    chosen = choose_variants(variants)
    ours = tuple(v for v in chosen if v not in torchao_ref.VARIANTS)
    theirs = tuple(v for v in chosen if v in torchao_ref.VARIANTS)
    torchao_note = torchao_ref.unavailable(device, trial=False) if theirs else None
    if torchao_note is not None:
        chosen, theirs = ours, ()
    shapes = shapes or (QUICK_SHAPES if quick else SHAPES_8B)
    ms = ms or ((TRAIN_M[:1] + DECODE_M[:1]) if quick else (TRAIN_M + DECODE_M))
    cases = [(n, k, m) for n, k in shapes for m in ms]
    rows: dict[tuple, dict] = {}  # (n, k, m, pass) -> row, in table order
    for beside_torchao, sweep in ((False, ours), (True, theirs)):
        for seed, (n, k, m) in enumerate(cases):
            train = m > DECODE_M[-1]
            names = [v for v in sweep if train or v in DECODE_VARIANTS]
            if not names:
                continue
            sets = _input_sets(n, k, m, [v for v in chosen if train or v in DECODE_VARIANTS], seed=seed,
                               device=device)
            for pass_ in _passes(train, device):
                row = rows.setdefault((n, k, m, pass_), {"n": n, "k": k, "m": m, "pass": pass_})
                # beside torchao (minutes after ours), its ratios are against a BF16 timed beside them
                _measure(row, ["bf16", *names] if beside_torchao else names, sets, device=device, warmup=warmup,
                         reps=reps, rounds=rounds, beside_torchao=beside_torchao)
                if train and torchao_note is not None:
                    row["torchao_note"] = torchao_note
                if on_row is not None:
                    on_row(row, list(rows.values()))
            del sets
    return list(rows.values())


def _passes(train: bool, device: str) -> tuple[str, ...]:
    """A row's passes: decode sizes forward only (graphed on a GPU anyway), training sizes eager and, on a GPU,
    graphed too."""
    if not train:
        return ("fwd",)
    return TRAIN_PASSES if torch.device(device).type == "cuda" else tuple(PASSES)


def format_header() -> str:
    return f"{'N x K':>13} {'M':>6} {'pass':>13} {'bf16 ms':>9}" + "".join(f" {k + ' ms':>17} {'x':>6}" for k in KINDS)


def format_row(r: dict) -> str:
    """The table's line for row `r`: shape, M, pass, BF16 ms, then ms and speed-up per variant ("-": not run),
    then, timed in several rounds, each speed-up's range over them ("x by round"), then, for an eager row, each
    variant's host issue ms and GPU ms ("host / GPU ms"), marked "(host-bound)" where the host's exceed the GPU's:
    the GPU then waits for the host, and the eager time is the host's."""
    line = f"{r['n']:>6}x{r['k']:<6} {r['m']:>6} {r['pass']:>13} {r['bf16_ms']:>9.4f}" + variant_cells(r, KINDS, 17)
    host = [f"{v} {host_cell(r[f'{v}_host_ms'], r[f'{v}_gpu_ms'])}" for v in VARIANTS if f"{v}_host_ms" in r]
    by_round = [f"{v} {round_range(r[f'{v}_x_rounds'])}" for v in KINDS if f"{v}_x_rounds" in r]
    return (line + (f"  x by round: {', '.join(by_round)}" if by_round else "")
            + (f"  host / GPU ms: {', '.join(host)}" if host else ""))


def progress(r: dict) -> str:
    """Row `r` as measured so far: its table line and each variant's first-call seconds."""
    firsts = ", ".join(f"{v} {r[f'{v}_warmup_s']:.2f}" for v in VARIANTS if f"{v}_warmup_s" in r)
    return f"{format_row(r)}  first call s: {firsts}"


def summary(rows: list[dict], ours: str = "fp8_bi") -> list[str]:
    """Issue 12's targets, which are the batch-invariant linear's: per pass (decode rows apart) the rows that meet
    `gemm.target`, the short ones named; then, where torchao ran, the rows `ours` is ahead of both its variants on,
    the others named."""
    def name(r: dict) -> str:
        return f"{r['n']}x{r['k']} M = {r['m']}"

    by_pass: dict[str, list[dict]] = {}
    for r in rows:
        if f"{ours}_x" in r:
            by_pass.setdefault("decode" if r["m"] <= DECODE_M[-1] else r["pass"], []).append(r)
    lines = []
    for pass_, measured in by_pass.items():
        goals = [(r, target(r["n"], r["k"], r["m"], r["pass"])) for r in measured]
        short = [(r, goal) for r, goal in goals if r[f"{ours}_x"] < goal]
        named = ", ".join(f"{name(r)} {r[f'{ours}_x']:.2f}x of {goal:.2f}x" for r, goal in short)
        lines.append(f"{ours} {pass_}: target met on {len(measured) - len(short)} of {len(measured)} rows"
                     + (f"; short: {named}" if short else ""))
    against = [(r, max(r[f"{v}_x"] for v in torchao_ref.VARIANTS if f"{v}_x" in r)) for r in rows
               if f"{ours}_x" in r and any(f"{v}_x" in r for v in torchao_ref.VARIANTS)]
    behind = [(r, theirs) for r, theirs in against if r[f"{ours}_x"] <= theirs]
    if against:
        named = ", ".join(f"{name(r)} {r['pass']} {r[f'{ours}_x']:.2f}x against {theirs:.2f}x" for r, theirs in behind)
        lines.append(f"{ours} ahead of torchao on {len(against) - len(behind)} of {len(against)} rows"
                     + (f"; not ahead: {named}" if behind else ""))
    return lines


def format_table(rows: list[dict]) -> str:
    """The header and a line per row, each variant's first-call seconds summed over the rows (where compilation
    and autotuning went), the notes saying why a variant did not run, then the targets' `summary`."""
    firsts = {v: sum(r[f"{v}_warmup_s"] for r in rows if f"{v}_warmup_s" in r) for v in VARIANTS
              if any(f"{v}_warmup_s" in r for r in rows)}
    total = "first calls s (all rows): " + ", ".join(f"{v} {s:.1f}" for v, s in firsts.items())
    targets = [*summary(rows), *summary(rows, "fp8_bi_wblocks")]
    return "\n".join([format_header(), *map(format_row, rows), total, *notes(rows), *targets])
