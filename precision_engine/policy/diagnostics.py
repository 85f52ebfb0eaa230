"""Diagnostics: one problem found in a policy, with where it is and what to do about it.

Every check in the loader appends Diagnostics instead of raising, so a user sees all problems in one pass.
Policies come from people we do not know, so no text from one reaches a message unbounded: values are shown
through `shown` (a clipped repr), and every field of a Diagnostic is clipped once more as it is made.
"""

from __future__ import annotations

import difflib
import reprlib
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Iterable, Literal

Severity = Literal["error", "warning"]

MAX_FIELD = 1000  # characters in one message, hint, key path or file name: a screenful, never a file's worth
MAX_SUGGESTABLE = 64  # names longer than this are never compared: difflib is quadratic in their length
MAX_CHOICES = 1024  # ... against at most this many (transformers knows ~400 model types; a policy a handful)

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 60
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = 6
_REPR.maxlevel = 3


def shown(value: object) -> str:
    """A repr of `value` for a message, at most ~60 characters per string however large `value` is."""
    return _REPR.repr(value)


def clip(text: str, limit: int = MAX_FIELD) -> str:
    """`text` with its middle cut out when longer than `limit`, keeping the start and the end."""
    if len(text) <= limit:
        return text
    keep = (limit - 5) // 2
    return f"{text[:keep]} ... {text[-keep:]}"


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

    def __post_init__(self) -> None:
        for name in ("message", "file", "key_path", "hint"):
            value = getattr(self, name)
            if isinstance(value, str) and len(value) > MAX_FIELD:
                object.__setattr__(self, name, clip(value))

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
    if not isinstance(word, str) or len(word) > MAX_SUGGESTABLE:
        return ""
    suggestable = tuple(c for c in choices if isinstance(c, str) and len(c) <= MAX_SUGGESTABLE)
    return _closest(word, suggestable[:MAX_CHOICES])


@lru_cache(maxsize=1024)  # an alias repeats one unknown name thousands of times: compare it once
def _closest(word: str, choices: tuple[str, ...]) -> str:
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
            part = clip(str(part), MAX_SUGGESTABLE)
            text += f".{part}" if text else part
    return text
