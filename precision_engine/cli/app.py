"""The typer app behind `precision`: wires the verbs, and maps every error to one line and an exit status in
one table (EXIT_CODES)."""

from __future__ import annotations

import inspect
import json
import os
import sys
import warnings

import typer
from typer.core import TyperGroup

from precision_engine import __version__

from precision_engine.cli import bench, model, plan, run, sglang, validate
from precision_engine.errors import (ModelError, NonFiniteError, OperandError, PolicyError, PrecisionError,
                                     UnsupportedError, UsageError, first_line)


# The exit statuses, for every verb: 1 is always a verdict, never an accident.
EXIT_OK = 0  # valid / same / the promise holds
EXIT_VERDICT = 1  # invalid (validate, plan), different (diff), the promise is broken (check)
EXIT_ERROR = 2  # a usage error or a failure: bad flags, an unknown model, a refusal, out of memory, a crash
EXIT_PIPE_CLOSED = 141  # stdout's reader went away (`| head`): the verb stops quietly, as one SIGPIPE kills would

# Verbs whose verdict is the policy's validity: there a PolicyError IS the answer "invalid". Everywhere else
# (diff, check, export, bench) a policy that does not load is trouble, and 1 would claim "different" or "broken".
JUDGES_POLICIES = frozenset({"validate", "plan"})

# Exception type -> exit status, first match wins. Anything not listed (a bug, MemoryError,
# torch.OutOfMemoryError) exits EXIT_ERROR with one line; PRECISION_TRACEBACK=1 shows the traceback.
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (UsageError, EXIT_ERROR),
    (PolicyError, EXIT_VERDICT),  # in JUDGES_POLICIES verbs only; EXIT_ERROR elsewhere
    (ModelError, EXIT_ERROR),
    (UnsupportedError, EXIT_ERROR),
    (OperandError, EXIT_ERROR),
    (NonFiniteError, EXIT_ERROR),
    (PrecisionError, EXIT_ERROR),
)


def exit_code(err: BaseException, verb: str | None) -> int:
    """The exit status of `verb` ending in `err` (see EXIT_CODES)."""
    if isinstance(err, PolicyError) and verb not in JUDGES_POLICIES:
        return EXIT_ERROR
    return next((code for kind, code in EXIT_CODES if isinstance(err, kind)), EXIT_ERROR)


def error_lines(err: BaseException) -> list[str]:
    """A PolicyError's diagnostics already read `file:line:col: error: ...`; anything else gets a prefix."""
    if isinstance(err, PolicyError):
        return [str(d) for d in err.diagnostics]
    if isinstance(err, PrecisionError):
        return [f"error: {err}"]
    if isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] in TORCH_EXTRA:
        return [f"error: this verb needs the torch extra, which is not installed (no module {err.name!r}) "
                "(hint: pip install 'precision-engine[torch]')"]
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError" or _cpu_allocation_failed(err):
        return [f"error: out of memory ({first_line(err)}) (hint: smaller sizes, e.g. --batch or --seq, or a "
                "machine with more memory)"]
    return [f"error: internal error, {type(err).__name__}: {first_line(err)} "
            "(set PRECISION_TRACEBACK=1 for the traceback, and please report it)"]


def _cpu_allocation_failed(err: BaseException) -> bool:
    """torch's CPU allocator reports a failed allocation as a plain RuntimeError."""
    return isinstance(err, RuntimeError) and "can't allocate memory" in str(err)


# The modules of the `torch` extra (pyproject.toml); validate and schema run without them.
TORCH_EXTRA = frozenset({"torch", "triton", "transformers", "safetensors"})


def error_object(err: BaseException, verb: str | None) -> dict:
    """What `--json` prints on failure: the same lines, the exit status and, for a policy, each diagnostic."""
    result = err.result if isinstance(err, PrecisionError) and err.result else {}
    document = {**result, "error": {"type": type(err).__name__, "message": " ".join(error_lines(err)),
                                    "exit_code": exit_code(err, verb)}}
    if isinstance(err, PolicyError):
        document["error"]["diagnostics"] = [d.to_dict() for d in err.diagnostics]
    return document


def _quiet_libraries() -> None:
    """transformers' progress bars, logging and warnings stay off the user's terminal: our own lines say
    what happened."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    warnings.filterwarnings("ignore", module=r"transformers(\.|$)")
    warnings.filterwarnings("ignore", module=r"huggingface_hub(\.|$)")
    if "transformers" in sys.modules:
        from transformers.utils import logging

        logging.set_verbosity_error()
        logging.disable_progress_bar()


def _point_stdout_at_devnull() -> None:
    """After the pipe closed, so that the interpreter's last flush of stdout does not fail again on the way out."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no file (a test's runner captures it): nothing will flush into a pipe
        pass


class _ErrorsAsExitCodes(TyperGroup):
    """Every exception becomes its lines on stderr and its exit status from EXIT_CODES."""

    def invoke(self, ctx):
        verb_args = [*getattr(ctx, "_protected_args", ()), *ctx.args]
        _quiet_libraries()
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise  # a verb's verdict (typer.Exit), --help, and the parser's own usage errors (exit 2) pass through
        except BrokenPipeError:
            _point_stdout_at_devnull()
            raise typer.Exit(EXIT_PIPE_CLOSED) from None
        except Exception as err:  # noqa: BLE001 (the one place that turns any failure into an exit status)
            if os.environ.get("PRECISION_TRACEBACK"):
                raise
            verb = ctx.invoked_subcommand
            if "--json" in verb_args:  # a machine reads stdout: it gets an object, the person still gets stderr
                typer.echo(json.dumps(error_object(err, verb), indent=2))
            for line in error_lines(err):
                typer.echo(line, err=True)
            raise typer.Exit(exit_code(err, verb)) from None


app = typer.Typer(
    name="precision",
    cls=_ErrorsAsExitCodes,
    help="Precision policies for FP8 RL: validate, plan and diff policies; check, export and run them on a model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
for verbs in (validate, plan, bench, model, run, sglang):
    verbs.register(app)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"precision-engine {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the version and exit."),
) -> None:
    """Precision policies for FP8 RL: validate, plan and diff policies; check, export and run them on a model."""


def unwrap_help(doc: str) -> str:
    """Docstring paragraphs as one line each (the terminal wraps them; rich keeps hard line breaks, which
    leave dangling words at other widths); indented paragraphs (examples) keep their lines."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(p if any(line.startswith(" ") for line in p.splitlines()) else " ".join(p.split())
                       for p in paragraphs)


def _unwrap_all(typer_app: typer.Typer) -> None:
    for command in typer_app.registered_commands:
        doc = command.help or (command.callback.__doc__ if command.callback else None)
        if doc:
            command.help = unwrap_help(doc)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _unwrap_all(group.typer_instance)


_unwrap_all(app)


def main() -> None:
    """Console entry point."""
    app()
