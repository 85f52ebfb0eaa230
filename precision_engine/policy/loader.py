"""The load pipeline: file -> extends -> --set -> schema -> meaning checks -> frozen Policy.

Every stage appends diagnostics rather than stopping, so one run reports every problem; only a policy with
no error is built. Two exceptions avoid cascades of follow-on errors: a file that is not valid YAML is not
checked further, and when an `extends` base fails to load, checks that the base could satisfy (missing keys,
references, meaning) are skipped.

A file named on the command line that does not exist, is not a regular file or has a name the file system
refuses is a usage error (exit 2); a missing or refused `extends` target is a problem inside the policy
(exit 1). Diagnostics located in a base name the file being checked too.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

from precision_engine.errors import PolicyError, UsageError
from precision_engine.policy.build import build_policy
from precision_engine.policy.diagnostics import Diagnostic, clip, did_you_mean
from precision_engine.policy.extends import display_name, load_document, shipped_path, shipped_policies
from precision_engine.policy.overrides import apply_overrides, parse_override
from precision_engine.policy.model import Policy
from precision_engine.policy.schema import check_structure
from precision_engine.policy.semantic import check_built, check_data
from precision_engine.policy.yaml_source import Loc


@dataclass(frozen=True)
class CheckResult:
    """One policy file checked: the Policy when it has no error, and every diagnostic found."""

    file: str
    policy: Policy | None
    diagnostics: tuple[Diagnostic, ...]

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if not d.is_error]

    def ok(self, *, strict: bool = False) -> bool:
        return not self.errors and not (strict and self.warnings)


def resolve_source(source: str | Path) -> Path:
    """A policy file path, or the shipped policy of that name; UsageError when neither exists."""
    path = _find(source)
    if path is not None:
        return path
    raise _not_found([str(source)])


def _not_found(sources: Sequence[str]) -> UsageError:
    shipped = shipped_policies()
    hints = [hint for hint in (did_you_mean(Path(source).stem, shipped) for source in sources) if hint]
    return UsageError(f"policy file not found: {clip(', '.join(sources), 300)} (shipped policies: "
                      f"{', '.join(shipped)})" + (f" ({'; '.join(hints)})" if hints else ""))


def _find(source: str | Path) -> Path | None:
    """The file `source` names, None when nothing of that name exists, UsageError when it cannot be a policy
    (a directory, a device, a name the file system refuses)."""
    path, text = Path(source), str(source)
    try:
        mode = path.stat().st_mode if text.strip() else None  # Path("") is the working directory
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as err:  # ENAMETOOLONG (a name over 255 bytes), EACCES, ELOOP, ...
        raise UsageError(f"cannot open policy {clip(text, 300)}: {err.strerror or err}") from None
    if mode is not None and stat.S_ISREG(mode):
        return path
    if "/" not in text and not text.endswith((".yaml", ".yml")) and shipped_path(text):
        return shipped_path(text)  # even when a directory of that name (a run's outputs?) is here
    if mode is not None and stat.S_ISDIR(mode):
        raise UsageError(f"{text} is a directory, not a policy file (to check every policy in it: "
                         f"precision validate {os.path.join(text, '*.yaml')})")
    if mode is not None:
        raise UsageError(f"{text} is not a regular file (a device, FIFO or socket); policies are files")
    return None


def check_policy(source: str | Path, overrides: Sequence[str] = ()) -> CheckResult:
    """Load and check one policy; never raises for problems inside the policy."""
    path = resolve_source(source)
    data, source_map, diagnostics = load_document(path)
    complete = not diagnostics
    policy = None
    named_by_file = isinstance(data, dict) and "name" not in data
    if named_by_file:  # a policy that names itself nothing (an ablation extending another, mostly) is named by its file
        data["name"] = path.stem
        source_map.values[("name",)] = Loc(display_name(path))
    if data is not None:
        data, problems = apply_overrides(data, source_map, overrides)
        diagnostics += problems
        structure = check_structure(data, source_map, complete=complete)
        if named_by_file and data.get("name") == path.stem:
            structure = [_named_by_file(d, path.stem) for d in structure]
        diagnostics += structure
        if complete:
            diagnostics += check_data(data, source_map)
        if not any(d.is_error for d in diagnostics):
            policy = build_policy(data, source_map, path)
            built_problems = check_built(policy, source_map)
            diagnostics += built_problems
            if any(d.is_error for d in built_problems):
                policy = None
    name = display_name(path)
    unique = sorted(dict.fromkeys(_in_context(d, name) for d in diagnostics), key=Diagnostic.sort_key)
    return CheckResult(name, policy, tuple(unique))


def _in_context(diagnostic: Diagnostic, name: str) -> Diagnostic:
    """A problem located in a base (a rule there names a format this file removed) also names this file,
    unless its message does already (an extends chain)."""
    if diagnostic.file in (None, name) or diagnostic.file.startswith("--set") or name in diagnostic.message:
        return diagnostic
    return replace(diagnostic, message=f"{diagnostic.message} (in a base of {name})")


def _named_by_file(diagnostic: Diagnostic, stem: str) -> Diagnostic:
    """A problem with a name the policy took from its file says so, and suggests one to write instead."""
    if diagnostic.key_path != "name":
        return diagnostic
    suggestion = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("_.-") or "my_policy"
    return replace(diagnostic, hint=f"the policy has no `name:`, so it is named after its file; add "
                   f"`name: {suggestion}`")


def load_policy(source: str | Path, overrides: Sequence[str] = ()) -> Policy:
    """The checked Policy; PolicyError with every error when there is one (warnings are not raised)."""
    result = check_policy(source, overrides)
    if result.policy is None:
        raise PolicyError(result.errors)
    return result.policy


def validate_files(sources: Iterable[str | Path], overrides: Sequence[str] = ()) -> list[CheckResult]:
    """Check several policies. Bad flags and missing files are usage errors, raised before any check runs."""
    sources = list(sources)
    for text in overrides:
        parse_override(text)
    missing = [str(source) for source in sources if _find(source) is None]
    if missing:
        raise _not_found(missing)
    return [check_policy(source, overrides) for source in sources]
