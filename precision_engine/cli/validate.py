"""`precision validate` and `precision schema`: check policies, print the schema editors use.

Both stay torch-free so they answer in a fraction of a second; `--model` is the one path that loads the
compiler and model inventory, imported inside the command.
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from precision_engine.cli.options import JsonOpt, SetOpt

FilesArg = Annotated[list[str], typer.Argument(
    metavar="FILE", show_default=False,
    help="Policy files, or names of shipped policies (bf16_baseline, jetrl_unified, ...).")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-m", metavar="MODEL", show_default=False,
    help="Also check against a model: a built-in name (tiny-llama, qwen3-8b, ...), an HF model dir or config.json.")]
StrictOpt = Annotated[bool, typer.Option("--strict", help="Fail (exit 1) on warnings too.")]


def validate(files: FilesArg, set_: SetOpt = None, model: ModelOpt = None, as_json: JsonOpt = False,
             strict: StrictOpt = False) -> None:
    """Check policy files: structure (schema), meaning, and with --model the rules against a real model.

    Every problem is reported in one pass: `file:line:col: error: key.path: message (hint: ...)`.

    Exit status: 0 valid; 1 invalid (an error, or a warning with --strict);
    2 usage error (a bad flag or --model, or a FILE that does not exist; a missing `extends` target is a
    policy error).

    Examples:

        precision validate policies/*.yaml

        precision validate my_policy.yaml --set correction.importance_sampling.threshold=1.5 --strict

        precision validate jetrl_unified --model qwen3-8b --json
    """
    from precision_engine.policy import validate_files

    results = validate_files(files, set_ or ())
    model_problems: dict[str, list] = {}
    if model is not None:
        from precision_engine.compile import model_diagnostics
        from precision_engine.models import load_inventory

        inventory = load_inventory(model)  # a bad --model is a ModelError: exit 2, never "invalid"
        model_problems = {r.file: model_diagnostics(r.policy, inventory) for r in results if r.policy}
    reports = []
    for result in results:
        diagnostics = list(result.diagnostics) + model_problems.get(result.file, [])
        errors = sum(d.is_error for d in diagnostics)
        warnings = len(diagnostics) - errors
        reports.append({"file": result.file, "policy": result.policy.name if result.policy else None,
                        "valid": errors == 0 and not (strict and warnings), "errors": errors,
                        "warnings": warnings, "diagnostics": diagnostics})
    valid = all(r["valid"] for r in reports)
    if as_json:
        for report in reports:
            report["diagnostics"] = [d.to_dict() for d in report["diagnostics"]]
        typer.echo(json.dumps({"valid": valid, "strict": strict, "model": model, "files": reports}, indent=2))
    else:
        _print_text(reports)
    raise typer.Exit(0 if valid else 1)


def _print_text(reports: list[dict]) -> None:
    for report in reports:
        for diagnostic in report["diagnostics"]:
            typer.echo(str(diagnostic))
    for report in reports:
        counts = f"{report['errors']} error(s), {report['warnings']} warning(s)"
        if report["valid"]:
            status = "ok" if not report["warnings"] else f"ok ({counts})"
        else:
            status = f"invalid: {counts}"
        typer.echo(f"{report['file']}: {status}")


def schema() -> None:
    """Print the policy JSON Schema (draft 2020-12), the single source of truth for the DSL's structure.

    Editors complete and check policies from it: shipped policies start with
    `# yaml-language-server: $schema=../policy/schema.json`.

    Example:

        precision schema > policy.schema.json
    """
    from precision_engine.policy import schema_text

    typer.echo(schema_text().rstrip("\n"))


def register(app: typer.Typer) -> None:
    app.command()(validate)
    app.command()(schema)
