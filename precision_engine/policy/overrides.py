"""`--set key.path=value` overrides, applied after `extends` for quick ablations.

The value is parsed as YAML (a scalar or a flow collection: `2.0`, `bf16`, `[128, 64]`, `{dtype: bf16}`),
and merged like `extends` (RFC 7386): a mapping merges into an existing mapping, anything else replaces, and
`null` (or an empty value) removes the key. Missing mappings on the way are created. `[n]` indexes an existing
list element: `rules.unified[1].compute=fp32`; a key holding dots is quoted: `rules."my.set"[0].compute=fp32`.
Diagnostics about a value the flag set point at the flag; the rest of a mapping it merged into keeps its own
locations, and a flag that fails changes nothing.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Iterable

from precision_engine.errors import UsageError
from precision_engine.policy.diagnostics import Diagnostic, format_path
from precision_engine.policy.extends import merge_patch
from precision_engine.policy.yaml_source import KeyPath, Loc, SourceMap, node_at, parse_yaml

_KEY = r'(?:"([^"]+)"|([^.\[\]="\s]+))((?:\[\d+\])*)'  # a key, bare or "quoted" (it may hold dots), then [n]s
_SEGMENT = re.compile(_KEY)
_PATH = re.compile(rf"{_KEY}(?:\.{_KEY})*")


def parse_key_path(text: str) -> tuple:
    """'rules.unified[1].compute' -> ('rules', 'unified', 1, 'compute'), 'rules."my.set"[0]' -> ('rules',
    'my.set', 0); UsageError when malformed."""
    if not _PATH.fullmatch(text):
        raise UsageError(f"--set: bad key path {text!r}; expected dotted keys like "
                         "correction.importance_sampling.threshold or rules.unified[0].compute (quote a key "
                         'holding dots: rules."my.set"[0].compute)')
    path: list = []
    for match in _SEGMENT.finditer(text):  # the full match above keeps these in step with the dots between
        path.append(match.group(1) or match.group(2))
        path.extend(int(i) for i in re.findall(r"\[(\d+)\]", match.group(3)))
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
            glob = value_text.lstrip().startswith("*")  # YAML reads a leading * as an alias
            diagnostics.extend(Diagnostic("error", d.message, label, None, None, format_path(path),
                                          f"quote a glob: --set '{text.partition('=')[0]}=\"{value_text.strip()}\"'"
                                          if glob else d.hint)
                               for d in problems)
            continue
        updated = copy.deepcopy(data)  # a path that fails halfway must leave the document as it was
        error = _assign(updated, path, value)
        if error:
            diagnostics.append(Diagnostic("error", error, label, None, None, format_path(path)))
            continue
        _locate(source_map, data, path, value, Loc(label))
        data = updated
    return data, diagnostics


def _locate(source_map: SourceMap, before: Any, path: KeyPath, value: Any, flag: Loc) -> None:
    """Point what the flag wrote at the flag: every value it set or replaced, with all below it, and mappings it
    created on the way; where it merged a mapping into one that was there (`before`), the keys it left alone
    keep their own locations."""
    for end in range(1, len(path)):
        source_map.values.setdefault(path[:end], flag)
    found, old = node_at(before, path)
    if not (isinstance(value, dict) and found and isinstance(old, dict)):
        source_map.replace_subtree(path, flag)
        return
    for key, item in value.items():
        _locate(source_map, before, path + (key,), item, flag)


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
