"""Module-name patterns, the one place that says what a rule matches.

A pattern is one of:

- `re:<regex>`: a regex that must match the WHOLE module name (like `re.fullmatch`). Unlike compressed-tensors
  (`re.match`, anchored at the start only) a trailing `$` is not needed, and `re:proj` does not match
  `q_proj`; write `re:.*proj`. `.` is any character, so escape literal dots: `re:.*mlp\\.gate`.
  Regexes run on RE2 (google-re2), which matches in time linear in the name, so no pattern can hang `plan`
  (Python's backtracking `re` takes exponential time on `(.*.*)*X`). RE2 reads Python's syntax, except
  for what needs backtracking: lookaround (`(?!...)`), backreferences and `\\Z` are refused when the
  policy is checked; order the rules instead (the first matching rule wins).
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

import re2

from precision_engine.policy.diagnostics import clip, shown
from precision_engine.policy.model import Rule

REGEX_PREFIX = "re:"
_GLOB_CHARS = frozenset("*?[")
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # RE2 would also print every refused pattern to stderr
_RE2_OPTIONS.never_capture = True  # groups only group here; nothing reads what they captured
_BACKTRACKING = ("invalid perl operator", "invalid escape sequence")


def _regex(body: str):
    return re2.compile(body, _RE2_OPTIONS)


@lru_cache(maxsize=4096)  # aliases repeat a pattern: check it once
def pattern_error(pattern: str) -> str | None:
    """Why `pattern` cannot be compiled, or None when it is fine."""
    if not pattern.startswith(REGEX_PREFIX):
        return None
    body = pattern[len(REGEX_PREFIX):]
    try:
        _regex(body)
    except re2.error as err:
        reason = clip(err.args[0].decode("utf-8", "replace") if err.args else "", 120)
        if reason.startswith(_BACKTRACKING):
            reason += " (patterns run on RE2, in linear time: no lookaround, backreferences or \\Z; " \
                "order the rules instead, the first match wins)"
        return f"invalid regex {shown(body)}: {reason}"
    return None


@lru_cache(maxsize=None)
def compile_pattern(pattern: str) -> Callable[[str], bool]:
    """name -> bool for one pattern. Raises re2.error for an invalid `re:` pattern (validation reports it first).

    Unbounded: every module is tested against the rules in order, so a bounded cache smaller than a policy's
    patterns recompiles each of them per module (minutes on a large policy); the 1 MB file limit bounds them."""
    if pattern.startswith(REGEX_PREFIX):
        regex = _regex(pattern[len(REGEX_PREFIX):])
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
