"""Module-name patterns, the one place that says what a rule matches.

A pattern is one of:

- `re:<regex>`: a Python regex that must match the WHOLE module name (`re.fullmatch`). Unlike compressed-tensors
  (`re.match`, anchored at the start only) a trailing `$` is not needed, and `re:proj` does not match
  `q_proj`; write `re:.*proj`. `.` is any character, so escape literal dots: `re:.*mlp\\.gate`.
- a glob, when it contains `*`, `?` or `[`: `fnmatch.fnmatchcase`, so `*` also crosses dots
  (`*.q_proj` matches `model.layers.0.self_attn.q_proj`) and matching is case-sensitive.
- otherwise an exact module name (`lm_head`).

`types` are module class names compared exactly (`Linear`). A rule matches when one of its patterns matches
the name (or it has none) and the class is one of its types (or it has none). Torch-free on purpose.
"""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache
from typing import Callable

from precision_engine.policy.model import Rule

REGEX_PREFIX = "re:"
_GLOB_CHARS = frozenset("*?[")


def pattern_error(pattern: str) -> str | None:
    """Why `pattern` cannot be compiled, or None when it is fine."""
    if pattern.startswith(REGEX_PREFIX):
        try:
            re.compile(pattern[len(REGEX_PREFIX):])
        except re.error as err:
            return f"invalid regex {pattern[len(REGEX_PREFIX):]!r}: {err}"
    return None


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Callable[[str], bool]:
    """name -> bool for one pattern. Raises re.error for an invalid `re:` pattern (validation reports it first)."""
    if pattern.startswith(REGEX_PREFIX):
        regex = re.compile(pattern[len(REGEX_PREFIX):])
        return lambda name: regex.fullmatch(name) is not None
    if _GLOB_CHARS.intersection(pattern):
        regex = re.compile(fnmatch.translate(pattern))
        return lambda name: regex.match(name) is not None
    return pattern.__eq__


def rule_matches(rule: Rule, name: str, type_name: str) -> bool:
    """Whether `rule` applies to the module `name` of class `type_name`."""
    if rule.types and type_name not in rule.types:
        return False
    return not rule.match or any(compile_pattern(p)(name) for p in rule.match)
