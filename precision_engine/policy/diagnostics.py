"""Diagnostics: one problem found in a policy, with where it is and what to do about it.

Every check in the loader appends Diagnostics instead of raising, so a user sees all problems in one pass.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass
from typing import Iterable, Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Diagnostic:
    """`file:line:col: error: <key.path>: message (hint: ...)`; any of file/line/column may be unknown."""

    severity: Severity
    message: str
    file: str | None = None
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based
    key_path: str = ""
    hint: str = ""

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def __str__(self) -> str:
        where = ":".join(str(part) for part in (self.file, self.line, self.column) if part is not None)
        text = f"{self.severity}: "
        if self.key_path:
            text += f"{self.key_path}: "
        text += self.message
        if self.hint:
            text += f" (hint: {self.hint})"
        return f"{where}: {text}" if where else text

    def to_dict(self) -> dict:
        return asdict(self)

    def sort_key(self) -> tuple:
        return (self.file or "", self.line or 0, self.column or 0, self.key_path, self.message)


# Words people bring from compressed-tensors / llm-compressor / torchao, mapped to ours: difflib cannot
# guess these, and they are the likeliest "unknown key" errors.
_SYNONYMS = {
    "strategy": "granularity",
    "group_size": "group",
    "block_structure": "block",
    "block_size": "block",
    "targets": "match",
    "target": "match",
    "num_bits": "dtype",
    "type": "dtype",
    "scale_dtype": "scale",
}


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """A hint naming the closest valid choice, or '' when nothing is close."""
    choices = list(choices)
    if not isinstance(word, str):
        return ""
    synonym = _SYNONYMS.get(word)
    if synonym in choices:
        return f"did you mean '{synonym}'?"
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    if not close:
        close = [c for c in choices if c.lower() == word.lower()]
    return f"did you mean '{close[0]}'?" if close else ""


def format_path(path: Iterable[object]) -> str:
    """('rules', 'unified', 1, 'match', 0) -> 'rules.unified[1].match[0]'."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text
