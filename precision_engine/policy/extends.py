"""`extends:` composition: load a policy file and its bases, merged into one document.

A reference is a shipped policy name (`bf16_baseline`) or, when it contains `/` or ends in `.yaml`/`.yml`, a
path relative to the referencing file. Policies come from people we do not know, so a path may only name a
regular `.yaml`/`.yml` file in the referencing file's directory or below it: absolute paths, `..`, symlinks
that lead out, devices and FIFOs are refused before anything is opened, and nothing else is ever read (so no
error can quote a file that is not a policy). A list is merged left to right and the file itself goes on top.
Merging is JSON Merge Patch (RFC 7386): mappings merge key by key, lists and scalars replace, and `null`
removes an inherited key (`correction: null` switches an inherited correction off). Because lists replace,
a child that redefines a rule set replaces the whole ordered list, never splices into it.
"""

from __future__ import annotations

import copy
import os
import re
import stat
from pathlib import Path, PureWindowsPath
from typing import Any

from precision_engine.policy.diagnostics import Diagnostic, did_you_mean, shown
from precision_engine.policy.yaml_source import SourceMap, parse_yaml, read_policy_text

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "policies"
_SUFFIXES = (".yaml", ".yml")
# Files one policy may pull in through `extends`, counted with repeats: a diamond of lists (`extends: [b, b, b]`
# in every file) grows exponentially, and a long chain would exhaust Python's recursion limit.
MAX_EXTENDS_FILES = 64
_PATH_HINT = "extends takes a shipped policy name or a .yaml file beside this policy (or below it), e.g. " \
    "./base.yaml; copy the base there"


def shipped_policies() -> list[str]:
    """Names of the policies shipped in the package, sorted."""
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml"))


def shipped_path(name: str) -> Path | None:
    """The shipped policy called `name`, or None; `name` never reaches the file system."""
    return SHIPPED_DIR / f"{name}.yaml" if name in shipped_policies() else None


def display_name(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when below it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)
    return str(path) if relative.startswith("..") else relative


def merge_patch(base: Any, patch: Any) -> Any:
    """RFC 7386 merge of `patch` over `base`; returns new containers and never mutates either input."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _is_path_reference(ref: str) -> bool:
    return "/" in ref or "\\" in ref or ref.endswith(_SUFFIXES)


IDENTITY_KEYS = ("name", "description")


def load_document(path: Path) -> tuple[Any, SourceMap, list[Diagnostic]]:
    """The policy at `path` with every `extends` resolved: (merged data, locations, diagnostics).

    Data is None when the file or a base could not be read as YAML at all (syntax, tags, limits, duplicate
    keys): checking what is left would only add confusing follow-on errors. When data is returned together
    with diagnostics, a base failed to load and the merged document is incomplete.
    """
    diagnostics: list[Diagnostic] = []
    data, source_map = _load(path, [path.resolve()], diagnostics, [])
    return data, source_map, diagnostics


def _load(path: Path, chain: list[Path], diagnostics: list[Diagnostic], loaded: list[Path]) -> tuple[Any, SourceMap]:
    """`path` as the user wrote it (for messages); `chain` the resolved files that led here (for cycles);
    `loaded` every base loaded so far for this policy (for MAX_EXTENDS_FILES)."""
    name = display_name(path)
    text, problems = read_policy_text(path, name)
    diagnostics.extend(problems)
    if text is None:
        return None, SourceMap()
    data, source_map, problems = parse_yaml(text, name)
    diagnostics.extend(problems)
    if problems:
        return None, source_map
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        problem = f"a policy is a mapping of keys (version, name, rules, ...), got {got}"
        diagnostics.append(source_map.diagnostic((), problem) if data is not None else Diagnostic("error", problem,
                                                                                                   name))
        return None, source_map
    refs = data.pop("extends", None)
    if refs is None:
        return merge_patch({}, data), source_map
    if isinstance(refs, str):
        ref_paths = [(("extends",), refs)]
    elif isinstance(refs, list) and refs and all(isinstance(r, str) and r for r in refs):
        ref_paths = [(("extends", i), ref) for i, ref in enumerate(refs)]
    else:
        diagnostics.append(source_map.diagnostic(("extends",), "expected a policy name or path, or a non-empty "
                                                 "list of them", hint="e.g. extends: bf16_baseline"))
        return merge_patch({}, data), source_map
    merged: Any = {}
    merged_map = SourceMap()
    via = " -> ".join(display_name(p) for p in chain)
    for key_path, ref in ref_paths:
        target, problem, hint = _resolve(ref, path.parent)
        if target is None:
            diagnostics.append(source_map.diagnostic(key_path, f"extends target {shown(ref)} {problem} (via {via})",
                                                     hint=hint))
            continue
        if target.resolve() in chain:
            loop = chain[chain.index(target.resolve()):] + [target.resolve()]
            cycle = " -> ".join(display_name(p) for p in loop)
            diagnostics.append(source_map.diagnostic(key_path, f"extends cycle: {cycle}",
                                                     hint="remove one of these extends"))
            continue
        if len(loaded) >= MAX_EXTENDS_FILES:
            if len(loaded) == MAX_EXTENDS_FILES:  # report once, then stop loading anything
                loaded.append(target)
                diagnostics.append(source_map.diagnostic(
                    key_path, f"extends pulls in more than {MAX_EXTENDS_FILES} files",
                    hint="flatten the chain: a policy needs a base or two, not dozens"))
            continue
        loaded.append(target)
        base, base_map = _load(target, chain + [target.resolve()], diagnostics, loaded)
        if base is not None:
            merged = merge_patch(merged, _without_identity(base))
            merged_map = merged_map.overlay(base_map.without(*((key,) for key in IDENTITY_KEYS)))
    merged = merge_patch(merged, data)
    merged_map.prune(merged)  # the bases' locations under a list the policy replaced must not locate its errors
    return merged, merged_map.overlay(source_map)


def _without_identity(base: dict) -> dict:
    """A base's settings without its `name` and `description`: those say what the base is, and an ablation
    that inherited them would be reported under its parent's name (the loader names it after its file)."""
    return {key: value for key, value in base.items() if key not in IDENTITY_KEYS}


def _resolve(ref: str, base_dir: Path) -> tuple[Path | None, str, str]:
    """(the file `ref` names, "", "") or (None, why it may not be read, a hint)."""
    if not _is_path_reference(ref):
        path = shipped_path(ref)
        if path is not None:
            return path, "", ""
        shipped = shipped_policies()
        return None, f"is not a shipped policy; shipped: {', '.join(shipped)}", (
            did_you_mean(ref, shipped) or "a path must contain '/' or end in .yaml, e.g. ./base.yaml")
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", ref):
        return None, "is a URL; extends reads files beside the policy, never the network", _PATH_HINT
    if os.path.isabs(ref) or ref.startswith(("/", "\\", "~")) or PureWindowsPath(ref).drive:
        return None, "is an absolute path", _PATH_HINT
    if ".." in re.split(r"[/\\]", ref):
        return None, "leaves the policy's directory (..)", _PATH_HINT
    if not ref.endswith(_SUFFIXES):
        return None, "is not a .yaml or .yml file", _PATH_HINT
    target = Path(os.path.normpath(base_dir / ref))
    try:
        mode = target.stat().st_mode
        inside = target.resolve().is_relative_to(base_dir.resolve())
    except (FileNotFoundError, NotADirectoryError):
        stem = Path(ref).stem
        shipped = f"a shipped policy is named without .yaml: extends: {stem}" if shipped_path(stem) else ""
        return None, f"not found (looked for {display_name(target)})", shipped
    except OSError as err:  # ENAMETOOLONG, EACCES, ELOOP, ...
        return None, f"cannot be read ({err.strerror or err})", ""
    if not inside:
        return None, "is a link that leads out of the policy's directory", _PATH_HINT
    if stat.S_ISDIR(mode):
        return None, f"is a directory, not a policy file (looked for {display_name(target)})", ""
    if not stat.S_ISREG(mode):
        return None, "is not a regular file (a device, FIFO or socket)", _PATH_HINT
    return target, "", ""
