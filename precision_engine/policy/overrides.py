"""`--set key.path=value` overrides, applied after `extends` for quick ablations.

The value is parsed as YAML (a scalar or a flow collection: `2.0`, `bf16`, `[128, 64]`, `{dtype: bf16}`),
and merged like `extends` (RFC 7386): a mapping merges into an existing mapping, anything else replaces, and
`null` (or an empty value) removes the key. Missing mappings on the way are created. `[n]` indexes an existing
list element: `rules.unified[1].compute=fp32`. Diagnostics about an overridden value point at the flag.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from precision_engine.errors import UsageError
from precision_engine.policy.diagnostics import Diagnostic, format_path
from precision_engine.policy.extends import merge_patch
from precision_engine.policy.yaml_source import Loc, SourceMap, parse_yaml

_SEGMENT = re.compile(r"([^.\[\]=\s]+)((?:\[\d+\])*)")


def parse_key_path(text: str) -> tuple:
    """'rules.unified[1].compute' -> ('rules', 'unified', 1, 'compute'); UsageError when malformed."""
    path: list = []
    for part in text.split("."):
        match = _SEGMENT.fullmatch(part)
        if not match:
            raise UsageError(f"--set: bad key path {text!r}; expected dotted keys like "
                             "correction.importance_sampling.threshold or rules.unified[0].compute")
        path.append(match.group(1))
        path.extend(int(i) for i in re.findall(r"\[(\d+)\]", match.group(2)))
    return tuple(path)


def parse_override(text: str) -> tuple[tuple, str]:
    """'a.b=value' -> (('a', 'b'), 'value')."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--set expects KEY.PATH=VALUE, got {text!r}")
    path = parse_key_path(key.strip())
    if path[0] == "extends":  # resolved before overrides apply: setting it would silently do nothing
        raise UsageError(f"--set {text!r}: `extends` cannot be overridden; write a policy file that extends "
                         "the base you want, or pass that policy instead")
    return path, value


def apply_overrides(data: dict, source_map: SourceMap, overrides: Iterable[str]) -> tuple[dict, list[Diagnostic]]:
    """`data` with every override applied in order; the source map is updated in place."""
    if isinstance(overrides, str):  # iterated, a string gave one override a character
        raise UsageError(f"overrides are a list of KEY.PATH=VALUE strings, got the string {overrides!r}")
    diagnostics: list[Diagnostic] = []
    for text in overrides or ():
        path, value_text = parse_override(text)
        label = f"--set {text}"
        value, _, problems = parse_yaml(value_text, label) if value_text.strip() else (None, None, [])
        if problems:
            diagnostics.extend(Diagnostic("error", d.message, label, None, None, format_path(path), d.hint)
                               for d in problems)
            continue
        error = _assign(data, path, value)
        if error:
            diagnostics.append(Diagnostic("error", error, label, None, None, format_path(path)))
            continue
        source_map.replace_subtree(path, Loc(label))
        for end in range(1, len(path)):  # mappings the flag created are located at the flag, not the file
            source_map.values.setdefault(path[:end], Loc(label))
    return data, diagnostics


def _assign(data: dict, path: tuple, value: Any) -> str | None:
    """Set `path` in `data` to `value` (merge-patch), or say why it cannot be done."""
    parent: Any = data
    for depth, key in enumerate(path[:-1]):
        where = format_path(path[:depth + 1])
        nxt = path[depth + 1]
        if isinstance(key, int):
            if not isinstance(parent, list) or key >= len(parent):
                return f"cannot index {where}: not an existing list element"
            child = parent[key]
        else:
            if not isinstance(parent, dict):
                return f"cannot set a key under {format_path(path[:depth])}: it is not a mapping"
            child = parent.get(key)
            if child is None and isinstance(nxt, int):
                return f"cannot index {where}: it does not exist"
            if child is None:
                child = parent[key] = {}
        parent = child
    last = path[-1]
    if isinstance(last, int):
        if not isinstance(parent, list) or last >= len(parent):
            return f"cannot index {format_path(path)}: not an existing list element"
        if value is None:
            return f"cannot remove the list element {format_path(path)}; set the whole list instead"
        parent[last] = merge_patch(parent[last], value)
        return None
    if not isinstance(parent, dict):
        return f"cannot set a key under {format_path(path[:-1])}: it is not a mapping"
    if value is None:
        parent.pop(last, None)
    else:
        parent[last] = merge_patch(parent.get(last), value)
    return None
