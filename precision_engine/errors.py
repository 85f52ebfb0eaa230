"""User-facing errors: precise types the core raises. The CLI maps each type to one clear line and an exit
status in one table (`cli.app.EXIT_CODES`); never a traceback unless PRECISION_TRACEBACK=1 is set."""

from __future__ import annotations


class PrecisionError(Exception):
    """Base of every error caused by user input (a policy, a model path, a flag)."""

    # What the verb had produced when it failed (check's report when --save could not write it): `--json`
    # prints it and the error as one object, so a reader of stdout parses one document, verdict included.
    result: dict | None = None


class UsageError(PrecisionError):
    """Bad flags or arguments."""


class PolicyError(PrecisionError):
    """A policy failed to load or validate. `diagnostics` holds every problem found in one pass."""

    def __init__(self, diagnostics: list) -> None:
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class ModelError(PrecisionError):
    """A model could not be found, built or matched against a plan."""


class UnsupportedError(PrecisionError):
    """A valid request this engine refuses on purpose (e.g. rewriting fused MoE experts)."""


class OperandError(PrecisionError, ValueError):
    """A tensor or format that a numerics function cannot take (dtype, shape, layout, granularity). The
    quantizers, the GEMMs and the exchange format raise this one type for the same kind of bad operand."""


class NonFiniteError(PrecisionError):
    """NaN or Inf reached a quantizer while the policy says `numerics.nonfinite: error`."""


class RunError(PrecisionError):
    """A run directory is missing, not one of ours, or would overwrite another run."""


class CheckpointError(RunError):
    """A checkpoint is incomplete, truncated or corrupted; the message names the file."""


class DataError(PrecisionError):
    """A data file (a recipe's problems, a tokenizer file) is missing, unreadable or not in the expected shape."""


def first_line(err: BaseException) -> str:
    """The first non-blank line of `err`'s message (its type's name if none): a library's multi-line message in one
    line of ours."""
    return next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
