"""What changes between two policies: in the merged documents, and in the numerics of each module.

The document diff compares `Policy.resolved` (after `extends` and `--set`) key path by key path. Lists of
mappings (rule lists) are compared item by item, lists of scalars (`match` patterns) as one value. Metadata
(`name`, `description`, `$schema`, `extends`) is reported but does not make two policies different, and
neither do changes that build the same policy (a default spelled out, a preset for an identical named format,
`'*'` for `['*']`): such a diff says the two are equivalent.

The plan diff answers what an ablation really toggles: for each phase, the modules whose numerics change,
grouped by (old numerics -> new numerics). A rule that moves or is relabelled without changing numerics is
not a change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from precision_engine.compile.plan import ModulePlan, Plan
from precision_engine.policy.diagnostics import format_path
from precision_engine.policy.model import Policy

METADATA_KEYS = frozenset({"name", "description", "$schema", "extends"})

_MISSING = object()


@dataclass(frozen=True)
class KeyChange:
    path: str  # e.g. "rules.unified[1].linear.grad_output"
    kind: Literal["added", "removed", "changed"]
    old: Any = None
    new: Any = None
    metadata: bool = False  # a name/description change: shown, but the policies still count as the same


@dataclass(frozen=True)
class PolicyDiff:
    changes: tuple[KeyChange, ...]
    equivalent: bool = False  # the documents differ, but both build the same settings

    @property
    def same(self) -> bool:
        return self.equivalent or all(change.metadata for change in self.changes)


def _is_rule_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and any(isinstance(item, Mapping) for item in value)


def _children(value: Any) -> list | None:
    """Keys (or indices) to descend into, or None for a leaf."""
    if isinstance(value, Mapping) and value:
        return list(value)
    if _is_rule_list(value):
        return list(range(len(value)))
    return None


def _get(value: Any, key: Any) -> Any:
    if isinstance(value, Mapping):
        return value.get(key, _MISSING)
    if isinstance(value, (list, tuple)) and isinstance(key, int) and key < len(value):
        return value[key]
    return _MISSING


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _leaves(value: Any, path: tuple) -> Iterator[tuple[tuple, Any]]:
    keys = _children(value)
    if keys is None:
        yield path, _plain(value)
        return
    for key in keys:
        yield from _leaves(_get(value, key), path + (key,))


def _changes(old: Any, new: Any, path: tuple) -> Iterator[KeyChange]:
    """Differences under `path`, in document order: keys only `new` has follow their siblings in `old`."""
    metadata = bool(path) and path[0] in METADATA_KEYS
    if old is _MISSING:  # a subtree only one side has is listed leaf by leaf: an added rule shows every key
        yield from (KeyChange(format_path(p), "added", new=v, metadata=metadata) for p, v in _leaves(new, path))
        return
    if new is _MISSING:
        yield from (KeyChange(format_path(p), "removed", old=v, metadata=metadata) for p, v in _leaves(old, path))
        return
    old_keys, new_keys = _children(old), _children(new)
    if old_keys is None or new_keys is None or type(old_keys[0]) is not type(new_keys[0]):
        if old != new:
            yield KeyChange(format_path(path), "changed", _plain(old), _plain(new), metadata)
        return
    for key in old_keys + [k for k in new_keys if k not in old_keys]:
        yield from _changes(_get(old, key), _get(new, key), path + (key,))


def diff_policies(a: Policy, b: Policy) -> PolicyDiff:
    """Key-path differences between the resolved documents of `a` and `b`, in document order."""
    return PolicyDiff(tuple(_changes(dict(a.resolved), dict(b.resolved), ())), _settings(a) == _settings(b))


def _settings(policy: Policy) -> tuple:
    """What a policy makes a run do: its rules (formats resolved into them), phases and every option; not its
    name, description or format table (a format no rule uses changes nothing)."""
    return (policy.version, policy.rule_sets, policy.phases, policy.kv_cache, policy.correction,
            policy.master_weights, policy.kernel, policy.numerics)


@dataclass(frozen=True)
class ChangeGroup:
    """Modules whose numerics go from `old` to `new` (one representative plan of each side)."""

    old: ModulePlan
    new: ModulePlan
    names: tuple[str, ...]


@dataclass(frozen=True)
class PlanDiff:
    phases: Mapping[str, tuple[ChangeGroup, ...]]
    identical_before: tuple[int, int]  # (modules identical in train forward and rollout, all modules)
    identical_after: tuple[int, int]

    @property
    def same(self) -> bool:
        return not any(self.phases.values())

    def changed(self, phase: str) -> int:
        return sum(len(group.names) for group in self.phases.get(phase, ()))


def diff_plans(a: Plan, b: Plan) -> PlanDiff:
    """Per phase, the modules whose numerics differ between plan `a` and plan `b` of the same model."""
    phases = {}
    for phase in [p for p in a.phases if p in b.phases]:
        groups: dict[tuple, list] = {}
        for old in a.phases[phase].modules:
            new = b.phases[phase].by_name.get(old.module.name)
            if new is None or old.numerics(phase) == new.numerics(phase):
                continue
            key = (old.numerics(phase), new.numerics(phase))
            groups.setdefault(key, [old, new, []])[2].append(old.module.name)
        phases[phase] = tuple(ChangeGroup(old, new, tuple(names)) for old, new, names in groups.values())

    def identity(plan: Plan) -> tuple[int, int]:
        total = len(plan.inventory.modules)
        return total - len(plan.differing()), total

    return PlanDiff(MappingProxyType(phases), identity(a), identity(b))
