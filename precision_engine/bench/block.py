"""`precision bench block`: one Llama-3.1-8B decoder layer (attention + MLP + their two norms), per policy.

The layer is the trainer's own: our decoder (`bench.rollout.random_decoder`: HF's random init, BF16 weights drawn
on the device) cut to one layer of the model's shapes and rewritten for each policy's training phase through the
pipeline (`pipeline.prepare(phase="train")`: plan, rewrite, KV-scale calibration where the cache is FP8). A policy
that unifies the phases with an FP8 cache (jetrl_unified_kv) rounds k/v through it in training, as GRPOTrainer
does. Two modes per policy: fast (cuBLAS FP8 GEMMs, F.linear, SDPA) and batch-invariant (every shipped policy's
own setting: the Triton fixed-tile GEMMs, norms and attention; the FP8 forward on the Triton kernel).

Timed on `batch` x `seq` tokens (default 4 x 2048 = 8192; attention is causal within each row):
  fwd      the layer's forward under no_grad
  fwd+bwd  forward, then backward of a fresh random dy into the input and every weight of the layer
  fwd+bwd/graph  the same step captured into a CUDA graph, timed as its replays (GPU only): what a graphed
           training step pays once the host's launches and Python are gone; FP8 weights are quantized inside
           the graph on every call (`numerics.linear`)
The input is a hidden-state tensor [B, T, H] that requires grad, as from the layer below (`Decoder.layers`): the
embedding, the final norm and lm_head are not timed. Before every call the weights are marked changed
(`rewrite.invalidate_weight_caches`, as after an optimizer step), so FP8 weights are re-quantized each time.
Every policy gets BF16 weights (bf16_baseline's FP32 masters would add a cast per linear; the optimizer is not
part of this timing). Median of `reps` CUDA-event timings after `warmup` calls (bench.timing), two or more input
sets rotated, every policy and mode taking turns call by call; with `rounds`, the median of that many such medians.
Each (policy, mode) holds its own layer (about 1.3 GB at 8B with its gradients and FP8 copies) and, graphed, its
own graph's memory. vs_bf16 =
bf16_baseline's ms in the same mode and pass / this row's; vs_bf16_fast = against bf16_baseline in fast mode; with
rounds, vs_bf16_rounds pairs each round with its own baseline (the table's "by round" range). Eager rows also get
the host's time to issue one call and the call's GPU time (`timing.host_and_gpu_ms`, first round): where the
first exceeds the second, the eager row measured the host.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import torch

from precision_engine.bench.rollout import MODES, random_decoder
from precision_engine.bench.gemm import GRAPHED, error_text, host_cell, round_range, timed_where_they_run
from precision_engine.bench.timing import host_and_gpu_ms, rotation
from precision_engine.errors import UsageError
from precision_engine.models.decoder import Decoder
from precision_engine.models.loader import config_spec, resolve_config
from precision_engine.pipeline import prepare
from precision_engine.rewrite import invalidate_weight_caches

POLICIES = ("bf16_baseline", "jetrl_unified", "jetrl_unified_wgrad_blocks", "jetrl_unified_kv", "fp8rl_rollout_tis")
BASELINE = "bf16_baseline"  # the policy every ratio is relative to
PASSES = ("fwd", "fwd+bwd", "fwd+bwd" + GRAPHED)
# Issue 12: the 8B block's training step under jetrl_unified against the BF16 block, both in the shipped
# policies' own mode (batch-invariant).
TARGET = ("jetrl_unified", "batch-invariant", 1.35)


def _forward(model: Decoder, x: torch.Tensor, dy: torch.Tensor) -> None:
    invalidate_weight_caches(model)
    with torch.no_grad():
        model.layers(x)


def _train_step(model: Decoder, x: torch.Tensor, dy: torch.Tensor) -> None:
    invalidate_weight_caches(model)  # as after an optimizer step: re-quantize every FP8 weight
    model.zero_grad(set_to_none=True)
    x.grad = None
    model.layers(x).backward(dy)


def bench_block(model_spec: str = "llama-3.1-8b", *, policies: Sequence[str] = POLICIES,
                modes: Sequence[str] | None = None, batch: int = 4, seq: int = 2048, reps: int = 20, warmup: int = 3,
                rounds: int = 1, device: str = "cuda", seed: int = 0,
                on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Rows {policy, mode, pass, ms, ms_rounds, vs_bf16, vs_bf16_fast, fp8_linears, ...} or {..., error}, one per
    (policy, mode, pass); `modes` picks from MODES' names (default all); `on_row` sees each row once its last
    round is measured (ratios are added once all are).

    Every (policy, mode) gets a layer of its own, rewritten once (the embedding and lm_head, never timed, are
    shared), and each pass times them all in turns call by call (`gemm.timed_where_they_run`), so that the card's
    clock, which moves within a second under load (fortieth session), reaches each alike. `rounds` > 1 repeats
    that: a row's ms is the median of its rounds' medians (`ms_rounds`), and each ratio also gets its range over
    the rounds, each round's time against that round's baseline (`vs_bf16_rounds`). `device` cpu runs the same
    loop (tests, at toy sizes)."""
    known = [name for name, _ in MODES]
    unknown = [m for m in modes or () if m not in known]
    if unknown:
        raise UsageError(f"mode {unknown[0]!r}: use {' or '.join(known)}")
    if rounds < 1:
        raise UsageError(f"rounds {rounds}: at least 1")
    passes = [(pass_, step) for pass_, step in zip(PASSES, (_forward, _train_step, _train_step))
              if not pass_.endswith(GRAPHED) or torch.device(device).type == "cuda"]
    config = resolve_config(model_spec)
    config["num_hidden_layers"] = 1
    with config_spec(config) as spec:  # the plan is compiled for the one-layer model
        layers = _rewritten_layers(config, spec, policies, [m for m in MODES if m[0] in (modes or known)],
                                   device=device, seed=seed)
        hidden = config["hidden_size"]

        def make():
            x = torch.randn(batch, seq, hidden, device=device, dtype=torch.bfloat16, requires_grad=True)
            return x, torch.randn(batch, seq, hidden, device=device, dtype=torch.bfloat16)

        sets = rotation(make, 2 * batch * seq * hidden * 2)
        base = {"batch": batch, "seq": seq, "tokens": batch * seq, "device": torch.device(device).type}
        rows = {(policy, mode, pass_): {"policy": policy, "mode": mode, **base, **outcome, "pass": pass_,
                                        **({} if "error" in outcome else {"ms_rounds": []})}
                for (policy, mode), (_, outcome) in layers.items() for pass_, _ in passes}
        for round_ in range(rounds):
            for pass_, step in passes:
                _time_pass(rows, layers, pass_, step, sets, warmup=warmup, reps=reps, first=round_ == 0)
                if round_ == rounds - 1:
                    for row in (r for r in rows.values() if r["pass"] == pass_):
                        _finish(row, on_row)
    _add_ratios(list(rows.values()))
    return list(rows.values())


def _rewritten_layers(config: dict, spec: str, policies: Sequence[str], modes: Sequence[tuple[str, bool]], *,
                      device: str, seed: int) -> dict[tuple[str, str], tuple[Decoder | None, dict]]:
    """(policy, mode) -> (its model, {fp8_linears}) or (None, {error}): every one drawn from the same seed and
    rewritten for its policy's training phase in its mode. One policy failing must not lose the others."""
    layers, shared = {}, None
    for policy in policies:
        for mode, invariant in modes:
            try:
                model = random_decoder(config, device=device, seed=seed)
                if shared is not None:  # only the layer is timed: one embedding and lm_head serve every copy
                    model.model.embed_tokens, model.lm_head = shared.model.embed_tokens, shared.lm_head
                layers[(policy, mode)] = (model, {"fp8_linears": _rewrite(model, spec, policy, invariant, device)})
                shared = model if shared is None else shared
            except Exception as err:  # noqa: BLE001
                layers[(policy, mode)] = (None, {"error": error_text(err)})
    return layers


def _time_pass(rows: dict, layers: dict, pass_: str, step: Callable, sets: list[tuple], *, warmup: int, reps: int,
               first: bool) -> None:
    """One round of one pass: every layer whose row has not failed, timed in turns call by call; a call that
    fails leaves its error in its row and the others are timed without it. The host's time to issue one eager call
    is measured in the first round only."""
    graphed = pass_.endswith(GRAPHED)
    calls = {key: (lambda x, dy, model=model: step(model, x, dy))
             for key, (model, _) in layers.items() if "error" not in rows[(*key, pass_)]}
    if not calls:
        return
    turns = timed_where_they_run(calls, sets, graphed=graphed, warmup=warmup, reps=reps, baseline=None)
    for key, err in turns.errors.items():
        rows[(*key, pass_)]["error"] = error_text(err)
    for key, ms in turns.ms.items():
        row = rows[(*key, pass_)]
        row["ms_rounds"].append(ms)
        if first and not graphed:  # a layer step queues hundreds of launches: two calls fit CUDA's queue
            try:
                row["host_ms"], row["gpu_ms"] = host_and_gpu_ms(calls[key], sets, warmup=warmup, reps=reps,
                                                                calls=2)
            except Exception as err:  # noqa: BLE001
                row["error"] = error_text(err)


def _finish(row: dict, on_row: Callable[[dict], None] | None) -> None:
    """A row after its last round: its median ms, or its error alone."""
    if "error" in row:
        row.pop("ms_rounds", None)
    else:
        row["ms"] = statistics.median(row["ms_rounds"])
    if on_row is not None:
        on_row(row)


def _rewrite(model: Decoder, spec: str, policy: str, invariant: bool, device: str) -> int:
    """`model` rewritten for the policy's training phase in one mode; returns how many linears run FP8."""
    flag = "true" if invariant else "false"
    ready = prepare(policy, spec, phase="train", device=device, overrides=(f"numerics.batch_invariant={flag}",),
                    loader=lambda *_, **__: model)
    model.batch_invariant = invariant
    # GRPOTrainer's rule: training sees the FP8 cache's rounding only when both phases share the numerics
    model.kv_scales = ready.kv_scales if ready.policy.kv_cache.is_fp8 and ready.plan.all_identical else None
    model.train()
    return len(ready.report.linears)


def _add_ratios(rows: list[dict]) -> None:
    """vs_bf16 and vs_bf16_fast from the medians; with several rounds, vs_bf16_rounds pairs each round's time
    with its own baseline's."""
    found = {(r["policy"], r["mode"], r["pass"]): r for r in rows if "ms" in r}
    for row in rows:
        if "ms" not in row:
            continue
        same, fast = found.get((BASELINE, row["mode"], row["pass"])), found.get((BASELINE, MODES[0][0], row["pass"]))
        if same:
            row["vs_bf16"] = same["ms"] / row["ms"]
            if len(row["ms_rounds"]) > 1:
                row["vs_bf16_rounds"] = [b / t for b, t in zip(same["ms_rounds"], row["ms_rounds"])]
        if fast:
            row["vs_bf16_fast"] = fast["ms"] / row["ms"]


def format_table(rows: list[dict]) -> str:
    """policy, mode, pass, ms and both ratios (or the error), then an eager row's host / GPU ms; last, the
    target's `summary`."""
    by_round = any("vs_bf16_rounds" in r for r in rows)
    lines = [f"{'policy':20} {'mode':16} {'pass':13} {'fp8 lin':>7} {'ms':>9} {'vs bf16':>8} {'vs bf16 fast':>12}"
             + (f" {'by round':>11}" if by_round else "") + "  host / GPU ms"]
    for r in rows:
        lead = f"{r['policy']:20} {r['mode']:16} {r['pass']:13} {r.get('fp8_linears', '-'):>7}"
        if "error" in r:
            lines.append(f"{lead} failed: {r['error']}")
            continue
        ratios = "".join(f" {r[key]:>{width - 1}.2f}x" if key in r else f" {'-':>{width}}"
                         for key, width in (("vs_bf16", 8), ("vs_bf16_fast", 12)))
        if by_round:
            ratios += f" {round_range(r['vs_bf16_rounds']) + 'x':>11}" if "vs_bf16_rounds" in r else f" {'-':>11}"
        host = f"  {host_cell(r['host_ms'], r['gpu_ms'])}" if "host_ms" in r else ""
        lines.append(f"{lead} {r['ms']:9.3f}{ratios}{host}")
    return "\n".join([*lines, *summary(rows)])


def summary(rows: list[dict]) -> list[str]:
    """`TARGET` judged on the rows that time it: the training step, eager and graphed. The target is against
    bf16_baseline in the same (batch-invariant) mode; where fast mode ran too, each line also says how the step
    stands against the fast BF16 block (cuBLAS, SDPA), which a run that gives up batch invariance would use."""
    policy, mode, target = TARGET
    if any(r.get("device") == "cpu" for r in rows):
        return ["CPU run: a check of the wiring at toy sizes; its times and ratios measure nothing, and the "
                f"{target:.2f}x target is judged on a GPU only"]
    steps = [r for r in rows if (r["policy"], r["mode"]) == (policy, mode) and r["pass"].startswith("fwd+bwd")
             and "vs_bf16" in r]
    return [f"{policy} {r['pass']} ({mode}): {r['vs_bf16']:.2f}x the BF16 block"
            + (f" (by round {round_range(r['vs_bf16_rounds'])}x)" if "vs_bf16_rounds" in r else "")
            + f", target {target:.2f}x {'met' if r['vs_bf16'] >= target else 'not met'}"
            + (f"; {r['vs_bf16_fast']:.2f}x the fast-mode BF16 block" if "vs_bf16_fast" in r else "")
            for r in steps]
