"""A run directory: everything needed to understand, resume and compare one training run.

    run/
      run.json          what ran: policy name, command line, versions, git commit; written last, so its
                        presence marks a complete run directory made by us (what `--resume` requires)
      policy.yaml       the policy's resolved document (after `extends` and `--set`)
      plan.json         the compiled plan
      metrics.jsonl     one row per step (metrics.MetricsLog)
      checkpoints/      step_000123/ ... (checkpoint)
      report/           PNGs and summary.md (report)

A new run refuses a non-empty directory, so two runs never interleave their metrics; an existing one is
opened only if run.json says we wrote it.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from precision_engine.errors import RunError
from precision_engine.policy import Policy
from precision_engine.rl.runs.files import fsync_dir, nearest_existing, to_json, write_atomic
from precision_engine.rl.runs.metrics import MetricsLog, read_rows

RUN_FORMAT = "precision-engine-run/1"
RUN_FILE = "run.json"
POLICY_FILE = "policy.yaml"
PLAN_FILE = "plan.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_DIR = "checkpoints"
REPORT_DIR = "report"

_PACKAGES = ("torch", "triton", "transformers", "safetensors", "numpy", "precision-engine")


@dataclass(frozen=True)
class RunDir:
    """An opened run directory. `info` is run.json as read; paths of its parts are properties."""

    path: Path
    info: Mapping[str, Any] = field(repr=False)

    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        *,
        policy: Policy | Mapping,
        plan: Mapping,
        command: Sequence[str] | None = None,
        config: Mapping | None = None,
    ) -> RunDir:
        """Start a new run in `path` (made if missing; refused if it holds anything).

        `policy` is a loaded Policy (its resolved document is written) or that document itself; `plan` is
        the JSON form of the compiled plan (compile.render.plan_to_dict); `command` defaults to sys.argv;
        `config` holds the run's own settings (seed, steps, recipe ...) for report and ablate to show.
        """
        path = cls.check_new(path)
        path.mkdir(parents=True, exist_ok=True)
        document = dict(policy.resolved) if isinstance(policy, Policy) else dict(policy)
        argv = list(sys.argv if command is None else command)
        write_atomic(path / POLICY_FILE, policy_yaml(document))
        write_atomic(path / PLAN_FILE, to_json(plan, indent=2) + "\n")
        (path / CHECKPOINTS_DIR).mkdir()
        info = {
            "format": RUN_FORMAT,
            "policy": policy.name if isinstance(policy, Policy) else document.get("name"),
            "command": argv,
            "command_line": shlex.join(argv),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "config": dict(config or {}),
            "versions": versions(),
            "resumed": [],
        }
        write_atomic(path / RUN_FILE, to_json(info, indent=2) + "\n")  # last: marks the directory complete
        fsync_dir(path)
        return cls(path, info)

    @staticmethod
    def check_new(path: str | os.PathLike) -> Path:
        """`path` as an absolute path if a new run may start there, else RunError: callers check before their
        expensive work (a warm-up, building the model), so a used or impossible --out costs nothing."""
        path = Path(path).expanduser().absolute()
        if path.is_dir() and any(path.iterdir()):
            hint = "pass --resume to continue it" if (path / RUN_FILE).is_file() else "choose an empty --out"
            raise RunError(f"{path} is not empty (hint: {hint})")
        existing = nearest_existing(path)
        if not existing.is_dir():
            raise RunError(f"{existing} exists and is not a directory (hint: choose another --out)")
        return path

    @classmethod
    def open(cls, path: str | os.PathLike, *, hint: str = "pass a directory `precision run` wrote") -> RunDir:
        """Open an existing run directory; RunError (with `hint` when it is none) unless run.json shows we
        made it."""
        path = Path(path).expanduser().absolute()
        marker = path / RUN_FILE
        if not marker.is_file():
            what = "does not exist" if not path.exists() else f"has no {RUN_FILE}"
            raise RunError(f"{path} is not a run directory: it {what} (hint: {hint})")
        try:
            info = json.loads(marker.read_text())
        except (OSError, ValueError) as err:
            raise RunError(f"{marker}: unreadable ({err})") from None
        if not isinstance(info, dict) or info.get("format") != RUN_FORMAT:
            raise RunError(f"{marker} was not written by precision-engine (expected format {RUN_FORMAT!r})")
        for key, kind in (("config", dict), ("resumed", list), ("versions", dict)):
            if not isinstance(info.get(key, kind()), kind):
                raise RunError(f"{marker}: {key!r} must be a JSON {'object' if kind is dict else 'array'}, "
                               f"got {type(info[key]).__name__} (was the file edited?)")
        return cls(path, info)

    def record_resume(
        self, command: Sequence[str] | None = None, *, step: int | None = None, config: Mapping | None = None
    ) -> RunDir:
        """Append this invocation to run.json's `resumed` list, so the record shows every restart. `config`, when
        given, replaces the recorded settings in the same atomic write (e.g. a raised step count), and the entry
        lists the settings it changed as [old, new]."""
        argv = list(sys.argv if command is None else command)
        entry = {"command_line": shlex.join(argv), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "step": step}
        info = dict(self.info)
        if config is not None:
            old = info.get("config", {})
            changed = {key: [old.get(key), value] for key, value in config.items()
                       if to_json(old.get(key), sort_keys=True) != to_json(value, sort_keys=True)}
            if changed:
                entry["changed"] = changed
            info["config"] = dict(config)
        info["resumed"] = [*info.get("resumed", []), entry]
        write_atomic(self.path / RUN_FILE, to_json(info, indent=2) + "\n")
        return RunDir(self.path, info)

    @property
    def policy_name(self) -> str:
        return self.info.get("policy") or self.path.name

    @property
    def policy_path(self) -> Path:
        return self.path / POLICY_FILE

    @property
    def plan_path(self) -> Path:
        return self.path / PLAN_FILE

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / CHECKPOINTS_DIR

    @property
    def report_dir(self) -> Path:
        return self.path / REPORT_DIR

    @contextmanager
    def lock(self) -> Iterator[RunDir]:
        """Hold the run for this process: another process's `lock` of it is refused (RunError) until this one
        ends, so two resumes never append rows and rewrite run.json side by side. An advisory flock on the
        directory, which the system releases however the process ends."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunError(f"{self.path} is in use by another process (hint: wait for it to end, or stop "
                               "it, then --resume)") from None
            yield self
        finally:
            os.close(fd)

    def metrics(self) -> MetricsLog:
        """The run's metrics log (a torn last line from a killed run is repaired on open)."""
        return MetricsLog(self.metrics_path)

    def metric_rows(self) -> list[dict[str, Any]]:
        """The logged rows, read without writing (report and ablate); RunError when there is no log."""
        return read_rows(self.metrics_path)

    def __fspath__(self) -> str:
        return os.fspath(self.path)


def versions() -> dict[str, str | None]:
    """Python, the installed versions of our dependencies (None when absent) and the git commit."""
    found: dict[str, str | None] = {"python": platform.python_version(), "platform": platform.platform()}
    for name in _PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    found["git_commit"] = _git_commit()
    return found


def _git_commit() -> str | None:
    """HEAD of the checkout this package runs from, with `+dirty` when tracked files changed; None outside git."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return None
        status = ["git", "status", "--porcelain", "--untracked-files=no"]
        dirty = subprocess.run(status, cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def policy_yaml(policy: Policy | Mapping) -> str:
    """The resolved policy document as policy.yaml holds it (a Policy, or that document itself)."""
    document = dict(policy.resolved) if isinstance(policy, Policy) else dict(policy)
    return yaml.safe_dump(_plain_data(document), sort_keys=False)


def _plain_data(value: Any) -> Any:
    """The policy document as YAML-safe data (its mappings may be read-only proxies, its lists tuples)."""
    if isinstance(value, Mapping):
        return {str(key): _plain_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_data(item) for item in value]
    return value
