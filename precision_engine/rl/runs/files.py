"""Durable file writes: a reader (or a resumed run) sees a file either whole or not at all.

The recipe is the POSIX one: write a temporary file in the same directory, fsync it, `os.replace` it over the
target, then fsync the directory so the rename itself survives a crash. A kill -9 only loses what sat in the
process; fsync additionally covers a power cut.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make a rename or a new entry in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Replace `path` with `data` atomically and durably."""
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(payload)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes files 0600; give the modes a plain open would
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def nearest_existing(path: Path) -> Path:
    """`path` or its closest ancestor that exists (a link counts, dangling or not): where a write to `path` would
    start, so a check before the work can say whether it may (a file there makes the rest of the path impossible)."""
    return next((p for p in (path, *path.parents) if p.exists() or p.is_symlink()), path)


def grant_default_permissions(directory: Path) -> None:
    """mkdtemp makes a staging directory private (0700); give it and its files the modes a plain mkdir and
    open would, so another user (a rollout server) can read what was written."""
    directory.chmod(0o777 & ~_umask())
    for path in directory.iterdir():
        path.chmod(0o666 & ~_umask())


def to_json(value: Any, **kwargs: Any) -> str:
    """json.dumps that also takes tensors and numpy values (as numbers or lists), so a trainer can log
    `loss.item()` or a permutation tensor without converting each one."""
    return json.dumps(value, default=_plain, **kwargs)


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):  # torch.Tensor, numpy.ndarray, numpy scalars
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable: {value!r}")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
