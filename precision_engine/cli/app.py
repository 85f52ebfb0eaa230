"""The typer app behind `precision`: wires the verbs and maps user errors to one line and an exit code."""

from __future__ import annotations

import os

import typer
from typer.core import TyperGroup

from precision_engine.cli import bench, model, plan, validate
from precision_engine.errors import PolicyError, PrecisionError


class _UserErrorsAsExitCodes(TyperGroup):
    """Every PrecisionError becomes `error: <message>` on stderr and its exit code.

    Set PRECISION_TRACEBACK=1 to see the full traceback instead.
    """

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PrecisionError as err:
            if os.environ.get("PRECISION_TRACEBACK"):
                raise
            for line in _error_lines(err):
                typer.echo(line, err=True)
            raise typer.Exit(err.exit_code) from None


def _error_lines(err: PrecisionError) -> list[str]:
    """A PolicyError's diagnostics already read `file:line:col: error: ...`; anything else gets the prefix."""
    if isinstance(err, PolicyError):
        return [str(d) for d in err.diagnostics]
    return [f"error: {err}"]


app = typer.Typer(
    name="precision",
    cls=_UserErrorsAsExitCodes,
    help="Precision policies for FP8 RL: validate, plan, diff, apply and benchmark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
for verbs in (validate, plan, bench, model):
    verbs.register(app)


def main() -> None:
    """Console entry point."""
    app()
