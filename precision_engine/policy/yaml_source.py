"""Safe YAML -> plain data (dict/list/str/int/float/bool/None) plus where every value came from.

We go through `yaml.compose` with the SafeLoader and build the data ourselves instead of calling a
constructor: no Python object is ever constructed from a tag, every node's line and column is kept for
diagnostics, and alias expansion is counted, in nodes and in characters (keys included), so a "billion
laughs" file, or one long string aliased thousands of times, stops at `MAX_NODES` or `MAX_CHARS` instead of
eating memory downstream. Nesting is capped at `MAX_DEPTH` before composing (PyYAML's composer recurses once
per level), and reading stops at `MAX_BYTES` whatever the file system says its size is. Numbers stay plain:
integers beyond 64 bits and tagged scalars that do not parse (`!!int abc`) are located errors. Merge keys
(`<<`) are rejected: `extends:` is the one composition mechanism, and it is located. Duplicate keys, which
PyYAML silently collapses, are errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import os
import stat

import yaml

from precision_engine.policy.diagnostics import Diagnostic, format_path, shown

MAX_BYTES = 1 << 20  # a policy is a few KiB; anything near this is a mistake or an attack
MAX_NODES = 20_000  # counted after alias expansion
MAX_CHARS = MAX_BYTES  # characters of keys and scalars, counted after alias expansion
MAX_DEPTH = 32
MAX_INT = 2**63 - 1  # a policy's integers are sizes and counts; larger ones overflow floats and int64 alike
_MAX_INT_TEXT = 64  # longer integer literals are refused unparsed (Python's int() is quadratic, then refuses)

KeyPath = tuple  # a key path: ('rules', 'unified', 0, 'match')

_TAG = "tag:yaml.org,2002:"


@dataclass(frozen=True)
class Loc:
    """A place in a source: a file and 1-based line/column, or a `--set` flag with no line."""

    file: str
    line: int | None = None
    column: int | None = None


@dataclass
class SourceMap:
    """Key path -> location of the value, and of the key for mapping entries (unknown-key errors point there)."""

    values: dict[KeyPath, Loc] = field(default_factory=dict)
    keys: dict[KeyPath, Loc] = field(default_factory=dict)

    def locate(self, path: KeyPath, *, key: bool = False) -> Loc | None:
        """The location of `path`, or of its nearest located ancestor."""
        path = tuple(path)
        if key and path in self.keys:
            return self.keys[path]
        for end in range(len(path), -1, -1):
            loc = self.values.get(path[:end])
            if loc is not None:
                return loc
        return None

    def overlay(self, other: "SourceMap") -> "SourceMap":
        """Locations after merging `other`'s document over ours: where both define a path, other's wins."""
        return SourceMap({**self.values, **other.values}, {**self.keys, **other.keys})

    def without(self, *prefixes: KeyPath) -> "SourceMap":
        """A copy with nothing at or under any of `prefixes` (values a merge dropped)."""

        def kept(path: KeyPath) -> bool:
            return not any(path[:len(p)] == p for p in prefixes)

        return SourceMap({p: l for p, l in self.values.items() if kept(p)},
                         {p: l for p, l in self.keys.items() if kept(p)})

    def prune(self, document: Any) -> None:
        """Drop every path `document` does not hold. A base's map merged under a policy that replaced a list or
        scalar whole keeps the replaced value's deeper locations; pruned, a lookup falls back to the policy's."""
        for table in (self.values, self.keys):
            for path in [p for p in table if not node_at(document, p)[0]]:
                del table[path]

    def replace_subtree(self, prefix: KeyPath, loc: Loc) -> None:
        """Everything at or under `prefix` now comes from `loc` (a `--set` flag)."""
        n = len(prefix)
        for table in (self.values, self.keys):
            for path in [p for p in table if p[:n] == prefix]:
                del table[path]
        self.values[prefix] = loc
        self.keys[prefix] = loc

    def diagnostic(self, path: KeyPath, message: str, *, hint: str = "", severity: str = "error",
                   key: bool = False, at: KeyPath | None = None) -> Diagnostic:
        """A diagnostic on `path`, located at `at` (default: `path`) or its nearest located ancestor."""
        loc = self.locate(path if at is None else at, key=key) or Loc("<policy>")
        return Diagnostic(severity, message, loc.file, loc.line, loc.column, format_path(path), hint)


def node_at(document: Any, path: KeyPath) -> tuple[bool, Any]:
    """(True, the value at `path`) where `document` holds it, else (False, None)."""
    node = document
    for key in path:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            node = node[key]
        else:
            return False, None
    return True, node


def read_policy_text(path: Path, file: str) -> tuple[str | None, list[Diagnostic]]:
    """The file's text, or a diagnostic on `file` (the name the user knows it by, as every other diagnostic of
    this file gives it) when it is not a regular file, is too large, or is not UTF-8.

    st_size is not trusted (procfs reports 0 for endless files): reading stops after MAX_BYTES + 1 bytes, and
    the file is opened non-blocking and checked to be regular first, so a FIFO or device never hangs us.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as stream:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None, [Diagnostic("error", "not a regular file", file)]
            data = stream.read(MAX_BYTES + 1)
    except OSError as err:
        return None, [Diagnostic("error", f"cannot read: {err.strerror or err}", file)]
    if len(data) > MAX_BYTES:
        return None, [Diagnostic("error", f"file is larger than {MAX_BYTES} bytes; policies are limited to "
                                 f"{MAX_BYTES} bytes", file)]
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as err:
        before = data[:err.start]
        line, column = before.count(b"\n") + 1, len(before) - (before.rfind(b"\n") + 1) + 1  # column in bytes
        return None, [Diagnostic("error", f"not UTF-8 text ({err.reason} at byte {err.start})", file, line, column,
                                 hint="save the policy as UTF-8")]


def _unreadable(text: str, file: str) -> Diagnostic | None:
    """A character YAML forbids (NUL, most control characters), located; PyYAML reports only an offset."""
    try:
        yaml.reader.Reader(text)
    except yaml.reader.ReaderError as err:
        before = text[:err.position]
        line, column = before.count("\n") + 1, err.position - (before.rfind("\n") + 1) + 1
        return Diagnostic("error", f"invalid YAML: character U+{err.character:04X} is not allowed", file, line,
                          column, hint="remove control characters; policies are plain UTF-8 text")
    return None


def _too_deep(text: str, file: str) -> Diagnostic | None:
    """Nesting beyond MAX_DEPTH, found from the (iterative) event stream: PyYAML's composer recurses per level
    and would die with RecursionError on `[[[[...`."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    mark = event.start_mark
                    return Diagnostic("error", f"nesting deeper than {MAX_DEPTH} levels", file, mark.line + 1,
                                      mark.column + 1)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return None  # a syntax error: the composer below reports it with its location
    return None


def parse_yaml(text: str, file: str) -> tuple[Any, SourceMap, list[Diagnostic]]:
    """Parse one YAML document. On a syntax error data is None and the diagnostic says where."""
    problem = _unreadable(text, file) or _too_deep(text, file)
    if problem:
        return None, SourceMap(), [problem]
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        message = " ".join(str(p) for p in (err.context, err.problem) if p) or "invalid YAML"
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        return None, SourceMap(), [Diagnostic("error", f"invalid YAML: {message}", file, line, col)]
    finally:
        loader.dispose()
    builder = _Builder(loader, file)
    if node is None:
        return None, builder.source_map, []
    try:
        data = builder.build(node, (), 0)
    except _TooLarge as err:
        return None, SourceMap(), [Diagnostic("error", str(err), file, err.line, err.column)]
    return data, builder.source_map, builder.diagnostics


class _TooLarge(Exception):
    def __init__(self, message: str, node: yaml.Node) -> None:
        super().__init__(message)
        self.line = node.start_mark.line + 1
        self.column = node.start_mark.column + 1


class _Builder:
    def __init__(self, loader: yaml.SafeLoader, file: str) -> None:
        self.loader = loader
        self.file = file
        self.nodes = 0
        self.chars = 0
        self.source_map = SourceMap()
        self.diagnostics: list[Diagnostic] = []

    def loc(self, node: yaml.Node) -> Loc:
        return Loc(self.file, node.start_mark.line + 1, node.start_mark.column + 1)

    def error(self, node: yaml.Node, path: KeyPath, message: str, hint: str = "") -> None:
        loc = self.loc(node)
        self.diagnostics.append(Diagnostic("error", message, loc.file, loc.line, loc.column, format_path(path),
                                           hint))

    def count(self, node: yaml.Node) -> None:
        """Charge one node (and a scalar's text) to the expansion budget; every alias use pays again."""
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _TooLarge(f"more than {MAX_NODES} YAML nodes after expanding aliases (alias bomb?)", node)
        if isinstance(node, yaml.ScalarNode):
            self.chars += len(node.value)
            if self.chars > MAX_CHARS:
                raise _TooLarge(f"more than {MAX_CHARS} characters after expanding aliases (alias bomb?)", node)

    def build(self, node: yaml.Node, path: KeyPath, depth: int, at: Loc | None = None) -> Any:
        """Plain data for `node`; `at` overrides where the value is said to be (see `mapping`)."""
        self.count(node)
        if depth > MAX_DEPTH:
            raise _TooLarge(f"nesting deeper than {MAX_DEPTH} levels (recursive alias?)", node)
        self.source_map.values.setdefault(path, at or self.loc(node))
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _TAG + "seq":
                self.error(node, path, f"unsupported YAML tag {shown(node.tag)} on a list")
            return [self.build(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        if node.tag != _TAG + "map":
            self.error(node, path, f"unsupported YAML tag {shown(node.tag)} on a mapping")
        result: dict[str, Any] = {}
        first_seen: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _TAG + "merge":
                self.error(key_node, path, "YAML merge keys (<<) are not supported",
                           "use `extends:` to reuse a policy, or an alias (*name) for a whole value")
                continue
            if not isinstance(key_node, yaml.ScalarNode):  # never built: an alias bomb may hide in it
                kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
                self.error(key_node, path, f"mapping keys must be strings, got a {kind}")
                continue
            self.count(key_node)
            if key_node.tag != _TAG + "str":
                self.error(key_node, path, f"mapping keys must be strings, got {shown(key_node.value)}",
                           "quote the key")
                continue
            key = key_node.value
            if key in first_seen:
                self.error(key_node, path + (key,),
                           f"duplicate key {shown(key)} (first defined at line {first_seen[key].start_mark.line + 1})")
                continue
            first_seen[key] = key_node
            key_loc = self.loc(key_node)
            self.source_map.keys[path + (key,)] = key_loc
            # A block list or mapping starts on the line after its key; the key's line is where people look.
            block = isinstance(value_node, yaml.CollectionNode) and not value_node.flow_style
            result[key] = self.build(value_node, path + (key,), depth + 1, key_loc if block else None)
        return result

    def scalar(self, node: yaml.ScalarNode, path: KeyPath) -> Any:
        kind = node.tag.removeprefix(_TAG) if node.tag.startswith(_TAG) else None
        if kind in ("str", "timestamp"):  # dates stay text: a policy has no use for datetime objects
            return node.value
        if kind == "null":
            return None
        if kind not in ("bool", "int", "float"):
            self.error(node, path, f"unsupported YAML tag {shown(node.tag)}", "policies hold plain strings, "
                       "numbers, booleans, lists and mappings")
            return None
        if kind == "int" and len(node.value) > _MAX_INT_TEXT:
            self.error(node, path, f"integer of {len(node.value)} characters is out of range (at most {MAX_INT})")
            return None
        construct = getattr(self.loader, f"construct_yaml_{kind}")
        try:  # only explicit tags reach here unresolved (`!!int abc`); PyYAML then raises whatever it hits
            value = construct(node)
        except (ValueError, KeyError, IndexError):
            self.error(node, path, f"{shown(node.value)} is not a valid !!{kind}",
                       "remove the tag, or write a value of its type")
            return None
        if kind == "int" and abs(value) > MAX_INT:
            self.error(node, path, f"integer {shown(value)} is out of range (at most {MAX_INT})")
            return None
        return value
