"""`precision plan` and `precision diff`: what a policy does to a model, and what changes between two policies.

torch and transformers load inside the commands that build a model, never at import: `precision validate`
shares this app and must start fast.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from precision_engine.cli.options import JsonOpt, PolicyArg, SetOpt
from precision_engine.errors import PolicyError, UsageError

_MODEL_HELP = (
    "A built-in architecture (tiny-llama, llama-3.1-8b, qwen3-30b-a3b, ...), an HF model directory or a "
    "config.json. Built on the meta device: no weights, no download."
)
_model_option = typer.Option("--model", "-m", metavar="MODEL", help=_MODEL_HELP, show_default=False)
ModelOpt = Annotated[str, _model_option]
OptionalModelOpt = Annotated[str | None, _model_option]
PhaseOpt = Annotated[str | None, typer.Option("--phase", metavar="PHASE", help="One phase only: train or rollout.")]


def _console():
    from rich.console import Console

    # Wide when piped or captured, so module names and formats are never wrapped mid-table.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def plan(
    policy: PolicyArg,
    model: ModelOpt,
    phase: PhaseOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Resolve POLICY against a model: per-module formats for every phase, FP8 FLOP share, and whether
    training-forward and rollout numerics are identical, module by module.

    Examples:

      precision plan policies/jetrl_unified.yaml --model llama-3.1-8b

      precision plan fp8rl_rollout_tis --model qwen3-30b-a3b --phase rollout

      precision plan jetrl_unified --model ./Qwen3-8B/config.json --set numerics.batch_invariant=false --json
    """
    from precision_engine.compile import compile_plan, model_diagnostics
    from precision_engine.compile.render import plan_to_dict, render_plan
    from precision_engine.models import load_inventory
    from precision_engine.policy import check_policy

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
    else:
        render_plan(_console(), compiled, phases)
        for diagnostic in diagnostics:
            typer.echo(str(diagnostic), err=True)
    if any(d.is_error for d in diagnostics):
        raise typer.Exit(1)


def diff(
    policy_a: PolicyArg,
    policy_b: PolicyArg,
    model: OptionalModelOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Compare two policies after `extends` is resolved, and with --model which modules' numerics change.

    Exit status like `diff`: 0 same, 1 different, 2 trouble (bad flags, a policy or model that does not load).
    Names and descriptions are shown but do not count as differences.

    Examples:

      precision diff fp8_rollout_naive jetrl_unified

      precision diff jetrl_unified jetrl_unified_kv --model llama-3.1-8b

      precision diff bf16_baseline my_ablation.yaml --model qwen3-8b --json
    """
    from precision_engine.compile import compile_plan, diff_plans, diff_policies
    from precision_engine.compile.render import diff_to_dict, render_plan_diff, render_policy_diff

    from precision_engine.policy import load_policy

    # Exit 1 means "different" here: trouble loading anything exits 2, as with `diff` (the app's EXIT_CODES).
    a, b = load_policy(policy_a), load_policy(policy_b)
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


def register(app: typer.Typer) -> None:
    app.command()(plan)
    app.command()(diff)
