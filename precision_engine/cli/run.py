"""`precision run`, `precision report` and `precision ablate`: thin wrappers over `rl.run` and `rl.runs`.

torch loads inside the command bodies, never at import (`precision validate` shares the app).
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from typing import Annotated, NamedTuple, Optional

import typer

from precision_engine.cli.options import PolicyOpt, SetOpt
from precision_engine.errors import UsageError

RecipeOpt = Annotated[str, typer.Option("--recipe", "-r", help="The task and its reward: math.")]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, max=2**63 - 1,
                                      help="Seed of data order, warm-up, sampling: same seed, same run.")]
StepsOpt = Annotated[int, typer.Option("--steps", help="GRPO steps (one rollout batch and one update each).")]
DeviceOpt = Annotated[str, typer.Option("--device", help="cpu or cuda.")]
ModelOpt = Annotated[
    Optional[str],
    typer.Option("--model", "-m", metavar="DIR", show_default=False,
                 help="A local HF model directory with its tokenizer (default: the recipe's own small model, "
                      "warmed up once and cached)."),
]
DataOpt = Annotated[
    Optional[Path],
    typer.Option("--data", metavar="FILE", show_default=False,
                 help="Training problems: GSM8K-style JSONL/parquet or verl's parquet (default: generated)."),
]
HeldoutOpt = Annotated[
    Optional[Path],
    typer.Option("--heldout", metavar="FILE", show_default=False,
                 help="Held-out problems (default: the recipe's held-out split, or the head of --data)."),
]
EvalEveryOpt = Annotated[int, typer.Option(
    "--eval-every", help="Steps between held-out evaluations and checkpoints (the newest 3 kept).")]
HeldoutSizeOpt = Annotated[int, typer.Option("--heldout-size", help="Held-out problems per evaluation (greedy).")]
MixOpt = Annotated[
    Optional[str],
    typer.Option("--mix", metavar="KIND=WEIGHT,...", show_default=False,
                 help="Kinds of generated problems and their weights: add, sub, mul, word (default: add=1)."),
]
PromptsOpt = Annotated[int, typer.Option("--prompts", help="Prompts per step.")]
SamplesOpt = Annotated[int, typer.Option("--samples", "-n", help="Samples per prompt (the GRPO group).")]
MaxNewTokensOpt = Annotated[
    Optional[int],
    typer.Option("--max-new-tokens", show_default=False,
                 help="Tokens a response may take, in rollouts and held-out evaluation (default: 6 for the recipe's "
                      "own model, whose answers are a few characters; 512, verl's data.max_response_length, with "
                      "--model)."),
]
TemperatureOpt = Annotated[float, typer.Option(
    "--temperature", help="Rollout sampling temperature; the trainer's logprobs use the same (held-out: greedy).")]
TopPOpt = Annotated[float, typer.Option("--top-p", help="Rollout nucleus sampling: the smallest set of tokens "
                                        "holding this much probability (1: off).")]
TopKOpt = Annotated[int, typer.Option("--top-k", help="Rollout sampling from the k likeliest tokens (0 or -1: off).")]


def run(
    policy: PolicyOpt,
    recipe: RecipeOpt = "math",
    out: Annotated[Optional[Path], typer.Option("--out", "-o", show_default=False,
                                                help="The run directory (default: runs/<policy>-seed<seed>).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its last checkpoint, under "
                                         "the policy and flags it was started with (--steps may change).")]
    = False,
    fallback: Annotated[bool, typer.Option("--fallback", help="With --resume: set a damaged newest checkpoint aside "
                                           "(step_*.corrupt) and continue from the previous intact one.")]
    = False,
    backend: Annotated[str, typer.Option("--backend", help="builtin (this machine) or verl (Ray + FSDP + SGLang).")]
    = "builtin",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="verl: print the command and its overrides only.")]
    = False,
    set_: SetOpt = None,
    seed: SeedOpt = 0,
    steps: StepsOpt = 300,
    eval_every: EvalEveryOpt = 25,
    heldout_size: HeldoutSizeOpt = 1000,
    prompts: PromptsOpt = 32,
    samples: SamplesOpt = 8,
    max_new_tokens: MaxNewTokensOpt = None,
    temperature: TemperatureOpt = 1.0,
    top_p: TopPOpt = 1.0,
    top_k: TopKOpt = 0,
    mix: MixOpt = None,
    model: ModelOpt = None,
    data: DataOpt = None,
    heldout: HeldoutOpt = None,
    device: DeviceOpt = "cpu",
    verl_overrides: Annotated[Optional[list[str]], typer.Argument(
        metavar="[VERL_OVERRIDES]...", show_default=False,
        help="--backend verl only: Hydra overrides passed to verl, e.g. actor_rollout_ref.model.path=DIR.")] = None,
) -> None:
    """Train with GRPO under POLICY's numerics and report reward, held-out accuracy, mismatch and throughput.

    The built-in backend samples with the rollout engine (the policy's rollout numerics, FP8 KV cache included)
    and trains the policy's training-phase model; the run directory holds the resolved policy, the plan,
    metrics.jsonl, checkpoints and, at the end, the report. Kill it at any moment and --resume continues exactly:
    pass the policy and flags the run was started with (a different one is refused), or a larger --steps to train
    longer.

    Examples:

      precision run --policy policies/jetrl_unified.yaml --recipe math

      precision run -p fp8rl_rollout_tis -r math --seed 1 --out runs/tis-1

      precision run -p fp8rl_rollout_tis -r math --seed 1 --out runs/tis-1 --resume

      precision run --backend verl -p jetrl_unified -r math --dry-run actor_rollout_ref.model.path=/models/llama
    """
    from precision_engine.policy import load_policy

    loaded = load_policy(policy, overrides=tuple(set_ or ()))
    if backend == "verl":
        given = _builtin_flags_given(resume=resume, fallback=fallback, seed=seed, steps=steps, eval_every=eval_every,
                                     heldout_size=heldout_size, prompts=prompts, samples=samples,
                                     max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                     top_k=top_k, mix=mix, model=model, data=data, heldout=heldout, device=device)
        if given:
            raise UsageError(f"{', '.join(given)}: the built-in backend's flags; verl takes its own keys (hint: "
                             "actor_rollout_ref.rollout.n=4 for --samples, trainer.total_training_steps=... for "
                             "--steps, actor_rollout_ref.model.path=DIR for --model, data.max_response_length=... "
                             "for --max-new-tokens, actor_rollout_ref.rollout.temperature=... for --temperature)")
        _run_verl(loaded, recipe, list(verl_overrides or ()), dry_run=dry_run, out=out)
        return
    if backend != "builtin":
        raise UsageError(f"--backend {backend!r}: use builtin or verl")
    if dry_run or verl_overrides:
        raise UsageError("--dry-run and verl overrides go with --backend verl")
    from precision_engine.rl.run import run as run_policy

    config = _config(recipe, seed, steps, eval_every, heldout_size, prompts, samples, mix, model, data, heldout,
                     device, _Sampling(max_new_tokens, temperature, top_p, top_k))
    target = out or Path("runs") / f"{loaded.name}-seed{seed}"
    try:
        with _Progress(steps, loaded.name) as progress:
            run_dir = run_policy(loaded, config, target, resume=resume, fallback=fallback, on_step=progress.step,
                                 log=progress.log)
    except KeyboardInterrupt:
        typer.echo(f"interrupted: every step {target} logged is kept (hint: the same command with --resume "
                   "continues from its last checkpoint)", err=True)
        raise typer.Exit(130) from None
    typer.echo(f"run directory: {run_dir.path} (report: {run_dir.report_dir / 'summary.md'})")


def report(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A directory written by `precision run`.")],
) -> None:
    """Write the plots (reward, held-out accuracy, mismatch, fraction corrected, throughput) and summary.md.

    Examples:

      precision report runs/jetrl_unified-seed0
    """
    from precision_engine.rl.runs import RunDir, write_report

    for path in write_report(RunDir.open(run_dir)):
        typer.echo(f"wrote {path}")


def ablate(
    policies: Annotated[list[str], typer.Option("--policy", "-p", metavar="POLICY", show_default=False,
                                                help="A policy to compare (repeat; the first is the baseline).")],
    recipe: RecipeOpt = "math",
    out: Annotated[Path, typer.Option("--out", "-o", help="One run directory per policy, and the comparison.")]
    = Path("runs/ablation"),
    seed: SeedOpt = 0,
    steps: StepsOpt = 300,
    eval_every: EvalEveryOpt = 25,
    heldout_size: HeldoutSizeOpt = 1000,
    prompts: PromptsOpt = 32,
    samples: SamplesOpt = 8,
    max_new_tokens: MaxNewTokensOpt = None,
    temperature: TemperatureOpt = 1.0,
    top_p: TopPOpt = 1.0,
    top_k: TopKOpt = 0,
    mix: MixOpt = None,
    model: ModelOpt = None,
    data: DataOpt = None,
    heldout: HeldoutOpt = None,
    device: DeviceOpt = "cpu",
) -> None:
    """Run several policies with the same seed, data and model, then write one comparison table and plots.

    A policy whose run already finished in OUT is not run again; an unfinished one resumes. A run in OUT made
    with another policy document or other flags is refused before anything runs: pass the same flags, or a new --out.

    Examples:

      precision ablate -p bf16_baseline -p fp8_rollout_naive -p fp8rl_rollout_tis -p jetrl_unified -r math
    """
    from precision_engine.policy import load_policy
    from precision_engine.rl.run import ablate as ablate_policies

    if len(policies) < 2:
        raise UsageError("ablate compares policies: pass --policy at least twice")
    loaded = [load_policy(p) for p in policies]
    config = _config(recipe, seed, steps, eval_every, heldout_size, prompts, samples, mix, model, data, heldout,
                     device, _Sampling(max_new_tokens, temperature, top_p, top_k))
    with _Progress(steps * len(loaded), "ablation") as progress:
        written = ablate_policies(loaded, config, out, on_step=lambda name, step, row: progress.step(step, row, name),
                                  log=progress.log)
    for path in written:
        typer.echo(f"wrote {path}")


class _Sampling(NamedTuple):
    """The rollouts' flags; max_new_tokens None: the default for the model (`rl.run.default_max_new_tokens`)."""

    max_new_tokens: int | None
    temperature: float
    top_p: float
    top_k: int


def _config(recipe, seed, steps, eval_every, heldout_size, prompts, samples, mix, model, data, heldout,
            device, sampling: _Sampling):
    from dataclasses import replace

    from precision_engine.pipeline import check_device
    from precision_engine.rl.run import RunConfig, default_max_new_tokens
    from precision_engine.rl.trainer import GRPOConfig

    check_device(device)
    max_new_tokens = default_max_new_tokens(model) if sampling.max_new_tokens is None else sampling.max_new_tokens
    grpo = replace(GRPOConfig(), prompts_per_step=prompts, samples_per_prompt=samples, max_new_tokens=max_new_tokens,
                   temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
    return RunConfig(recipe=recipe, seed=seed, steps=steps, eval_every=eval_every, checkpoint_every=eval_every,
                     heldout_size=heldout_size, mix=_mix(mix), model=model,
                     train_data=None if data is None else str(data),
                     heldout_data=None if heldout is None else str(heldout), device=device, grpo=grpo)


def _mix(text: str | None) -> dict[str, float] | None:
    """'add=0.8,word=0.2' -> {'add': 0.8, 'word': 0.2}; the recipe checks the kinds and weights."""
    if text is None:
        return None
    mix = {}
    for part in text.split(","):
        kind, sep, weight = part.partition("=")
        kind = kind.strip()
        try:
            value = float(weight)
        except ValueError:
            sep = ""
        if not sep:
            raise UsageError(f"--mix {text!r}: expected KIND=WEIGHT pairs separated by commas, e.g. add=0.8,word=0.2")
        if kind in mix:
            raise UsageError(f"--mix {text!r}: {kind} is given twice")
        mix[kind] = value
    return mix


def _builtin_flags_given(**values) -> list[str]:
    """The built-in backend's flags among `values` that differ from their defaults, as the user spelled them."""
    defaults = inspect.signature(run).parameters
    return [f"--{name.replace('_', '-')}" for name, value in values.items() if value != defaults[name].default]


def _run_verl(policy, recipe: str, overrides: list[str], *, dry_run: bool, out: Path | None) -> None:
    from precision_engine.integrations.verl.launch import build_command
    from precision_engine.integrations.verl.launch import run as run_verl

    if not dry_run and importlib.util.find_spec("verl") is None:  # before the policy and data files are written
        raise UsageError("--backend verl needs verl, which is not installed (hint: pip install "
                         "'precision-engine[verl]', or --dry-run to print the command)")
    launch = build_command(policy, recipe, overrides, dry_run=dry_run, run_dir=out)
    typer.echo(launch.render())
    if not dry_run:
        status = run_verl(launch)
        if status != 0:  # 1 is a verdict in this CLI; verl's failures are errors
            raise UsageError(f"verl's trainer exited with status {status} (its output is above)")


class _Progress:
    """A rich progress bar with a live line: reward, held-out accuracy, mismatch and tokens/s."""

    def __init__(self, total: int, label: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from precision_engine.cli.console import VerbConsole

        self.console = VerbConsole(stderr=True)
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("{task.fields[line]}"), console=self.console)
        self._task = self._bar.add_task(label, total=total, line="")
        self._label, self._done, self._accuracy = label, 0, None

    def __enter__(self) -> _Progress:
        return self  # the bar shows from the first message: a refusal before any work leaves no empty bar above it

    def __exit__(self, *exc) -> None:
        if self._bar.live.is_started:
            self._bar.stop()

    def log(self, message: str) -> None:
        self._bar.start()
        self._bar.console.log(message)

    def step(self, step: int, row: dict, name: str | None = None) -> None:
        self._bar.start()
        if "heldout/accuracy" in row:
            self._accuracy = row["heldout/accuracy"]
        if step == 0:
            self.log(f"{name or self._label}: held-out accuracy at start {self._accuracy:.1%}")
            return
        self._done += 1
        parts = [f"reward {row.get('reward/mean', float('nan')):.3f}"]
        if self._accuracy is not None:
            parts.append(f"held-out {self._accuracy:.1%}")
        if "mismatch/max_abs_dlogp" in row:
            parts.append(f"max|dlogp| {row['mismatch/max_abs_dlogp']:.3g}")
        if "rollout_corr/kl" in row:
            parts.append(f"kl {row['rollout_corr/kl']:.2e}")
        if "throughput/tokens_per_s" in row:
            parts.append(f"{row['throughput/tokens_per_s']:.0f} tok/s")
        description = f"{name} step {step}" if name else f"step {step}"
        self._bar.update(self._task, completed=self._done, description=description, line="  ".join(parts))


def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(report)
    app.command()(ablate)
