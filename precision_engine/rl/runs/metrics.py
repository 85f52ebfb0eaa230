"""metrics.jsonl: one JSON row per step, each either wholly on disk or absent after a kill -9.

A row is one `os.write` of one line (ending in a newline) on an O_APPEND descriptor, followed by fsync. A
process killed inside that write can leave at most a torn final line with no newline; opening the log cuts it
off. Steps strictly increase, so a row is never logged twice; on resume, `truncate_after(checkpoint.step)`
drops the rows of steps the resumed run will redo. The trainer appends step N's row *before* it saves
checkpoint N, so no row a checkpoint covers can be missing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from precision_engine.errors import RunError
from precision_engine.rl.runs.files import fsync_dir, to_json, write_atomic


class MetricsLog:
    """Append-only, crash-safe log of metric rows; `rows()` reads them back as dicts."""

    def __init__(self, path: str | os.PathLike, *, durable: bool = True) -> None:
        """`durable` fsyncs every row (survives a power cut, not only a kill); a row costs about a millisecond."""
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise RunError(f"{self.path} is not a file (hint: move it aside; the log is one JSON row per line)")
        self.durable = durable
        self._fd: int | None = None
        self._repair_torn_tail()
        rows = self.rows()
        self._last_step: int | None = rows[-1]["step"] if rows else None

    @property
    def last_step(self) -> int | None:
        """The step of the last row on disk, None when empty."""
        return self._last_step

    def append(self, row: Mapping[str, Any]) -> None:
        """Write one row; it must carry an integer `step` greater than every step already logged."""
        step = row.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"a metrics row needs a non-negative integer 'step', got {step!r}")
        if self._last_step is not None and step <= self._last_step:
            raise ValueError(f"step {step} is not after the last logged step {self._last_step} in {self.path}")
        line = (to_json(dict(row), separators=(",", ":")) + "\n").encode()  # json escapes newlines: one line
        fd = self._open()
        written = os.write(fd, line)
        while written < len(line):  # regular files write whole; a short write still ends in a newline or is cut
            written += os.write(fd, line[written:])
        if self.durable:
            os.fsync(fd)
        self._last_step = step

    def rows(self) -> list[dict[str, Any]]:
        """Every complete row, in order."""
        return list(_complete_rows(self.path)) if self.path.exists() else []

    def truncate_after(self, step: int) -> int:
        """Drop the rows of steps after `step` (pass -1 to drop all); returns how many were dropped.

        Rewritten atomically, so a kill during truncation leaves either the old log or the new one.
        """
        rows = self.rows()
        kept = [row for row in rows if row["step"] <= step]
        if len(kept) == len(rows):
            return 0
        self.close()
        text = "".join(to_json(row, separators=(",", ":")) + "\n" for row in kept)
        write_atomic(self.path, text)
        self._last_step = kept[-1]["step"] if kept else None
        return len(rows) - len(kept)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> int:
        if self._fd is None:
            existed = self.path.exists()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            if not existed:
                fsync_dir(self.path.parent)
        return self._fd

    def _repair_torn_tail(self) -> None:
        """Cut a final line without its newline: the remains of a write that a kill interrupted."""
        if not self.path.exists():
            return
        with self.path.open("r+b") as file:
            size = file.seek(0, os.SEEK_END)
            if size == 0:
                return
            file.seek(size - 1)
            if file.read(1) == b"\n":
                return
            end = _last_newline_end(file, size)
            file.truncate(end)
            file.flush()
            os.fsync(file.fileno())


def read_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The complete rows of the log at `path`, for readers (report, ablate): a torn tail is skipped, not cut,
    since a reader must not change a run a process may still be writing; a missing log is a RunError."""
    path = Path(path)
    if not path.is_file():
        what = "is not a file" if path.exists() else "is missing"
        raise RunError(f"{path} {what}: the run has no metrics to read (a run logs its step-0 row first)")
    return list(_complete_rows(path))


def _complete_rows(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            if not raw.endswith(b"\n"):
                return  # a torn tail: a writer's, or a killed one's that the next MetricsLog cuts
            try:
                row = json.loads(raw)
            except ValueError as err:
                raise RunError(f"{path}:{number}: not a JSON row ({err})") from None
            if not isinstance(row, dict) or not isinstance(row.get("step"), int):
                raise RunError(f"{path}:{number}: a metrics row must be an object with an integer 'step'")
            yield row


def _last_newline_end(file, size: int, chunk: int = 1 << 16) -> int:
    """Offset just past the last newline in `file` (0 if none), reading backwards."""
    position = size
    while position > 0:
        start = max(0, position - chunk)
        file.seek(start)
        block = file.read(position - start)
        index = block.rfind(b"\n")
        if index >= 0:
            return start + index + 1
        position = start
    return 0
