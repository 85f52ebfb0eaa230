"""`precision plan` and `precision diff`: what a policy does to a model, and what changes between two policies.

torch and transformers load inside the commands that build a model, never at import: `precision validate`
shares this app and must start fast.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from precision_engine.cli.options import JsonOpt, SetOpt, _POLICY_HELP
from precision_engine.errors import PolicyError, UsageError

_MODEL_HELP = (
    "A built-in architecture (tiny-llama, llama-3.1-8b, qwen3-30b-a3b, ...), an HF model directory or a "
    "config.json. Built on the meta device: no weights, no download."
)
_model_option = typer.Option("--model", "-m", metavar="MODEL", help=_MODEL_HELP, show_default=False)
ModelOpt = Annotated[str, _model_option]
OptionalModelOpt = Annotated[str | None, _model_option]
PhaseOpt = Annotated[str | None, typer.Option("--phase", metavar="PHASE", help="One phase only: train or rollout.")]
PoliciesArg = Annotated[Optional[list[str]], typer.Argument(metavar="POLICY", help=_POLICY_HELP,
                                                            show_default=False)]
PolicyOpts = Annotated[Optional[list[str]], typer.Option("--policy", "-p", metavar="POLICY", show_default=False,
                                                         help="The same as a POLICY argument (as in check and "
                                                         "export).")]
WideOpt = Annotated[bool, typer.Option("--wide", help="The full table: every operand, shape, kernel and rule "
                                       "(needs about 160 columns).")]


def _console(wide: bool = False):
    from precision_engine.cli.console import VerbConsole

    # The full table is wide when piped or captured, so module names and formats are never cut mid-table.
    return VerbConsole(width=None if sys.stdout.isatty() or not wide else 200, highlight=False)


def _policies(arguments: list[str] | None, options: list[str] | None, count: tuple[int, int]) -> list[str]:
    """POLICY arguments and --policy options together, between count[0] and count[1] of them."""
    given = [*(arguments or ()), *(options or ())]
    low, high = count
    if not low <= len(given) <= high:
        wanted = f"{low}" if low == high else f"{low} or {high}"
        raise UsageError(f"expected {wanted} policies (as POLICY arguments or --policy), got {len(given)}")
    return given


def plan(
    policies: PoliciesArg = None,
    model: ModelOpt = ...,
    policy_opt: PolicyOpts = None,
    phase: PhaseOpt = None,
    set_: SetOpt = None,
    wide: WideOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Resolve POLICY against a model: per-module formats for every phase, FP8 FLOP share, and whether
    training-forward and rollout numerics are identical, module by module.

    The table fits 80 columns: one row per module group, its numerics in one cell; --wide shows every column.

    Examples:

      precision plan policies/jetrl_unified.yaml --model llama-3.1-8b

      precision plan fp8rl_rollout_tis --model qwen3-30b-a3b --phase rollout

      precision plan jetrl_unified --model ./Qwen3-8B/config.json --set numerics.batch_invariant=false --json
    """
    from precision_engine.compile import compile_plan, model_diagnostics
    from precision_engine.compile.render import plan_to_dict, render_plan
    from precision_engine.models import load_inventory
    from precision_engine.policy import check_policy

    [policy] = _policies(policies, policy_opt, (1, 1))
    checked = check_policy(policy, overrides=tuple(set_ or ()))
    if checked.policy is None:
        raise PolicyError(checked.errors)
    loaded = checked.policy
    if phase is not None and phase not in loaded.phases:
        raise UsageError(f"--phase {phase!r}: {loaded.name} has phases {', '.join(loaded.phases)}")
    phases = [phase] if phase else list(loaded.phases)
    inventory = load_inventory(model)
    compiled = compile_plan(loaded, inventory)
    # The plan is shown even when the policy does not fit the model, so the user sees which modules are affected;
    # the problems follow it, and an error (an FP8 tile that does not divide a shape) fails the command.
    diagnostics = [*checked.warnings, *model_diagnostics(loaded, inventory)]
    if json_out:
        data = plan_to_dict(compiled, phases)
        data["diagnostics"] = [d.to_dict() for d in diagnostics]
        typer.echo(json.dumps(data, indent=2))
    elif wide:
        render_plan(_console(wide=True), compiled, phases)
    else:
        render_narrow(_console(), compiled, phases)
        for diagnostic in diagnostics:
            typer.echo(str(diagnostic), err=True)
    if any(d.is_error for d in diagnostics):
        raise typer.Exit(1)


def diff(
    policies: PoliciesArg = None,
    policy_opt: PolicyOpts = None,
    model: OptionalModelOpt = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", metavar="KEY.PATH=VALUE", show_default=False,
        help="Override a key of the second policy (or, given one policy, compare it with itself overridden), "
        "e.g. --set numerics.batch_invariant=false. Repeatable.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Compare two policies after `extends` is resolved, and with --model which modules' numerics change.

    Exit status like `diff`: 0 same, 1 different, 2 trouble (bad flags, a policy or model that does not load).
    Names and descriptions are shown but do not count as differences.

    Examples:

      precision diff fp8_rollout_naive jetrl_unified

      precision diff jetrl_unified jetrl_unified_kv --model llama-3.1-8b

      precision diff bf16_baseline my_ablation.yaml --model qwen3-8b --json

      precision diff jetrl_unified --set numerics.batch_invariant=false --model tiny-llama
    """
    from precision_engine.compile import compile_plan, diff_plans, diff_policies
    from precision_engine.compile.render import diff_to_dict, render_plan_diff, render_policy_diff

    from precision_engine.policy import load_policy

    # Exit 1 means "different" here: trouble loading anything exits 2, as with `diff` (the app's EXIT_CODES).
    given = _policies(policies, policy_opt, (1 if set_ else 2, 2))
    policy_a, policy_b = given[0], given[-1]
    if len(given) == 1:
        policy_b = f"{policy_a} --set {' --set '.join(set_)}"
    a, b = load_policy(given[0]), load_policy(given[-1], overrides=tuple(set_ or ()))
    plan_diff = None
    if model is not None:
        from precision_engine.models import load_inventory

        inventory = load_inventory(model)
        plan_diff = diff_plans(compile_plan(a, inventory), compile_plan(b, inventory))
    policy_diff = diff_policies(a, b)
    if json_out:
        typer.echo(json.dumps(diff_to_dict(policy_diff, plan_diff), indent=2, default=str))
    else:
        console = _console()
        render_policy_diff(console, policy_diff, policy_a, policy_b)
        if plan_diff is not None:
            render_plan_diff(console, plan_diff, model)
    same = policy_diff.same and (plan_diff is None or plan_diff.same)
    raise typer.Exit(0 if same else 1)


def render_narrow(console, compiled, phases) -> None:
    """The plan in 80 columns: per phase, one line per group of modules with the same numerics (every format
    named, as in `diff`), the modules under it, and whether each matches the other phase."""
    from rich.text import Text

    from precision_engine.compile.render import collapse, numerics_label, policy_lines, verdict_lines

    for phase in phases:
        other = "rollout" if phase == "train" else "train"
        console.print(f"{phase}: {compiled.policy.name} on {compiled.inventory.model_id}", highlight=False)
        groups: dict[tuple[str, str, bool], list[str]] = {}
        for mp in compiled.phases[phase].modules:
            key = (numerics_label(mp, phase), mp.rule or "(default)", compiled.identical(mp.module.name))
            groups.setdefault(key, []).append(mp.module.name)
        for (label, rule, same), names in groups.items():
            verdict = Text("yes") if same else Text("NO", style="bold red")
            *formats, compute, kernel = label.split(" · ") if " · " in label else (label, "", "")
            details = f"{compute} compute, kernel {kernel}, " if kernel else ""
            console.print(f"  {' · '.join(formats)}", highlight=False, markup=False)
            console.print(Text(f"    {details}rule {rule}, = {other}: ") + verdict, highlight=False)
            for name, count, _ in collapse([(name, None) for name in names]):
                console.print(f"      {name}" + (f" x{count}" if count > 1 else ""), highlight=False, markup=False)
        share = compiled.fp8_flop_share(phase)
        console.print(f"{phase}: FP8 share of linear/expert GEMM FLOPs per token: {share:.1%}\n", highlight=False)
    for line in policy_lines(compiled.policy) + verdict_lines(compiled):
        console.print(line, highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(plan)
    app.command()(diff)
