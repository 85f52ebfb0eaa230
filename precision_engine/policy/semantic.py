"""Meaning checks: what the schema cannot say (references, combinations, ranges that depend on each other).

They run on the merged plain data even when the schema found problems, so a user sees everything in one pass;
each check therefore looks only at values of the shape it needs and skips the rest (the schema already
reported those). `check_built` runs on the finished Policy for the checks that compare whole rule sets.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

from precision_engine.numerics.capabilities import forward_batch_invariant
from precision_engine.numerics.formats import PRESET_FORMATS, Granularity, QuantFormat
from precision_engine.policy.diagnostics import Diagnostic, did_you_mean
from precision_engine.policy.matching import pattern_error
from precision_engine.policy.model import PHASES, Policy
from precision_engine.policy.yaml_source import SourceMap

FP8_DTYPES = ("float8_e4m3", "float8_e5m2")
_OPERANDS = ("weight", "input", "grad_output", "wgrad_operands", "wgrad_input")
_ACTIVATIONS = ("input", "grad_output")
_GRANULARITIES = tuple(g.value for g in Granularity)
_CATCH_ALL = frozenset({"*", "re:.*", "re:.+"})


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def preset_data(fmt: QuantFormat) -> dict:
    """A preset format as policy data, so presets and user formats go through the same checks."""
    data = {"dtype": fmt.dtype.value, "granularity": fmt.granularity.value, "axis": fmt.axis.value,
            "scale": fmt.scale.value}
    if fmt.group is not None:
        data["group"] = fmt.group
    if fmt.block is not None:
        data["block"] = list(fmt.block)
    return data


def format_names(data: dict) -> list[str]:
    return list(_dict(data.get("formats"))) + [p for p in PRESET_FORMATS if p not in _dict(data.get("formats"))]


def resolve_format(ref: Any, data: dict) -> dict | None:
    """The format data a reference stands for (named, preset or inline), or None when unknown."""
    if isinstance(ref, dict):
        return ref
    if isinstance(ref, str):
        named = _dict(data.get("formats")).get(ref)
        if isinstance(named, dict):
            return named
        if ref in PRESET_FORMATS:
            return preset_data(PRESET_FORMATS[ref])
    return None


def is_fp8(fmt: dict | None) -> bool:
    return isinstance(fmt, dict) and fmt.get("dtype") in FP8_DTYPES


class _Checker:
    def __init__(self, data: dict, source_map: SourceMap) -> None:
        self.data = data
        self.map = source_map
        self.found: list[Diagnostic] = []

    def error(self, path: tuple, message: str, hint: str = "") -> None:
        self.found.append(self.map.diagnostic(path, message, hint=hint))

    def warning(self, path: tuple, message: str, hint: str = "") -> None:
        self.found.append(self.map.diagnostic(path, message, hint=hint, severity="warning"))

    def run(self) -> list[Diagnostic]:
        for name, fmt in _dict(self.data.get("formats")).items():
            if isinstance(fmt, dict):
                self.format_shape(("formats", name), fmt)
        for set_name, rules in _dict(self.data.get("rules")).items():
            if isinstance(rules, list):
                self.rule_set(set_name, rules)
        self.phases()
        self.importance_sampling()
        self.kv_cache()
        return self.found

    def format_shape(self, path: tuple, fmt: dict) -> None:
        """Granularity and its size parameters must agree."""
        granularity = fmt.get("granularity", "tensor")
        if granularity not in _GRANULARITIES:  # the schema reported it; guessing further only adds noise
            return
        at = path + ("granularity",) if "granularity" in fmt else path
        if granularity == "group" and "group" not in fmt:
            self.error(at, "granularity 'group' needs a group size", "add `group: 128` (1x128, as both papers)")
        if granularity == "block" and "block" not in fmt:
            self.error(at, "granularity 'block' needs a block shape", "add `block: [128, 128]`")
        if "group" in fmt and granularity != "group":
            self.error(path + ("group",), f"'group' is only used with granularity 'group', not {granularity!r}",
                       "set `granularity: group` or remove `group`")
        if "block" in fmt and granularity != "block":
            self.error(path + ("block",), f"'block' is only used with granularity 'block', not {granularity!r}",
                       "set `granularity: block` or remove `block`")
        if fmt.get("axis", "k") != "k" and granularity != "group":
            self.error(path + ("axis",), f"'axis' only applies to granularity 'group', not {granularity!r}")

    def rule_set(self, set_name: str, rules: list) -> None:
        seen: dict[tuple, int] = {}
        catch_all: int | None = None
        for index, rule in enumerate(rules):
            path = ("rules", set_name, index)
            if not isinstance(rule, dict):
                continue
            match, types = _patterns(rule.get("match")), _patterns(rule.get("types"))
            if "match" not in rule and "types" not in rule:
                self.error(path, "rule has neither 'match' nor 'types', so it matches nothing",
                           "add `match: [...]` (module names) or `types: [Linear]`")
            for i, pattern in _indexed(rule.get("match")):
                problem = pattern_error(pattern)
                if problem:
                    self.error(path + ("match", i) if isinstance(rule.get("match"), list) else path + ("match",),
                               problem)
            key = (frozenset(match), frozenset(types))
            if catch_all is not None:
                self.warning(path, f"never applies: rules.{set_name}[{catch_all}] matches every module first",
                             "move the catch-all rule to the end")
            elif key in seen and (match or types):
                self.warning(path, f"never applies: rules.{set_name}[{seen[key]}] has the same match and types "
                             "and comes first", "remove this rule or merge it into the earlier one")
            seen.setdefault(key, index)
            if catch_all is None and not types and _CATCH_ALL.intersection(match):
                catch_all = index
            if isinstance(rule.get("linear"), dict):
                self.linear(path + ("linear",), rule["linear"])

    def linear(self, path: tuple, linear: dict) -> None:
        formats: dict[str, dict | None] = {}
        unresolved = set()  # reported already (unknown name, no dtype): no follow-on errors that call them unset
        for operand in _OPERANDS:
            ref = linear.get(operand)
            if ref is None:
                continue
            fmt = resolve_format(ref, self.data)
            if fmt is None or not isinstance(fmt.get("dtype"), str):
                unresolved.add(operand)
            if fmt is None:
                if isinstance(ref, str) and ref not in _dict(self.data.get("formats")):  # else the schema said it
                    names = format_names(self.data)
                    self.error(path + (operand,), f"unknown format '{ref}'; defined: {', '.join(names)}",
                               did_you_mean(ref, names) or "define it under `formats:` or write it inline")
                continue
            formats[operand] = fmt
            if isinstance(ref, dict):
                self.format_shape(path + (operand,), ref)
            self.operand_role(path + (operand,), operand, fmt, ref)
        if unresolved & {"weight", "input"}:
            return
        weight, act = formats.get("weight"), formats.get("input")
        if weight is not None and act is not None and is_fp8(weight) != is_fp8(act):
            scheme = "W8A16" if is_fp8(weight) else "W16A8"
            self.error(path, f"{scheme}: weight is {weight.get('dtype')} but input is {act.get('dtype')}; an FP8 "
                       "GEMM needs both operands in FP8", "quantize both (W8A8) or neither")
        for operand in ("grad_output", "wgrad_operands", "wgrad_input"):
            if is_fp8(formats.get(operand)) and not (is_fp8(weight) and is_fp8(act)):
                plain = "input" if is_fp8(weight) else "weight"
                self.error(path + (operand,), f"FP8 {operand} needs an FP8 forward, but {plain} is "
                           f"{(formats.get(plain) or {}).get('dtype', 'unset')}",
                           "quantize weight and input too, or drop this operand")
        if is_fp8(formats.get("wgrad_input")) and not is_fp8(formats.get("wgrad_operands")):
            self.error(path + ("wgrad_input",), "FP8 wgrad_input needs an FP8 wgrad_operands (dy's side of the "
                       "same GEMM)", "set wgrad_operands, or drop wgrad_input")

    def operand_role(self, path: tuple, operand: str, fmt: dict, ref: Any) -> None:
        """Each GEMM operand has a layout its quantizer supports (numerics contract)."""
        if not is_fp8(fmt):
            return
        named = f" (format '{ref}')" if isinstance(ref, str) else ""
        granularity, axis = fmt.get("granularity", "tensor"), fmt.get("axis", "k")
        if operand in _ACTIVATIONS and granularity == "block":
            self.error(path, f"{operand} cannot use block granularity{named}: blocks are for weights",
                       "use `granularity: group, group: 128` (1x128 along K)")
        if operand not in ("wgrad_operands", "wgrad_input") and axis == "tokens":
            self.error(path, f"{operand} cannot be grouped along tokens{named}: axis 'tokens' is only for "
                       "wgrad_operands and wgrad_input", "use `axis: k`")
        if operand == "wgrad_operands" and (granularity != "group" or axis != "tokens"):
            self.error(path, f"wgrad_operands must be grouped along tokens{named}, got {granularity!r} "
                       f"along {axis!r}", "use `granularity: group, group: 128, axis: tokens` (128x1, Jet-RL)")
        if operand == "wgrad_input" and granularity != "block" and (granularity != "group" or axis != "tokens"):
            self.error(path, f"wgrad_input must be blocks or grouped along tokens{named}, got {granularity!r} "
                       f"along {axis!r}", "use `granularity: block, block: [128, 128]`")

    def phases(self) -> None:
        phases, rules = self.data.get("phases"), self.data.get("rules")
        if not isinstance(phases, dict) or not isinstance(rules, dict):
            return
        for phase in PHASES:
            name = phases.get(phase)
            if isinstance(name, str) and name not in rules:
                self.error(("phases", phase), f"undefined rule set '{name}'; defined: {', '.join(rules) or 'none'}",
                           did_you_mean(name, rules) or "define it under `rules:`")

    def importance_sampling(self) -> None:
        path = ("correction", "importance_sampling")
        spec = _dict(_dict(self.data.get("correction")).get("importance_sampling"))
        upper, lower = spec.get("threshold", 2.0), spec.get("lower_threshold")
        mode = spec.get("mode", "truncate")
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool)
                      for v in (upper, 0.5 if lower is None else lower))  # "" or [] is no number either
        if not numbers or mode not in ("truncate", "mask"):  # the schema reported these
            return
        not_finite = [(key, v) for key, v in (("threshold", upper), ("lower_threshold", lower))
                    if v is not None and not math.isfinite(v)]
        for key, value in not_finite:  # .nan/.inf are numbers to the schema, and NaN slips past `<= 1` below
            self.error(path + (key,), f"expected a finite number, got {value}",
                       "FP8-RL uses threshold: 2.0" if key == "threshold" else "the default is 1/threshold")
        if not_finite:
            return
        if mode == "truncate":
            if upper <= 1:
                self.error(path + ("threshold",), f"truncate mode needs threshold > 1, got {upper}",
                           "FP8-RL's TIS uses threshold: 2.0")
            if lower is not None:
                self.error(path + ("lower_threshold",), "lower_threshold only applies to mode 'mask'",
                           "remove it, or set `mode: mask`")
            return
        if upper <= 1:
            self.error(path + ("threshold",), f"mask mode needs threshold > 1, got {upper}")
        if lower is not None and not 0 < lower < 1:
            self.error(path + ("lower_threshold",), f"mask mode needs 0 < lower_threshold < 1, got {lower}",
                       "the default is 1/threshold")

    def kv_cache(self) -> None:
        kv = _dict(self.data.get("kv_cache"))
        calibrate, dtype = kv.get("calibrate", "never"), kv.get("dtype", "bf16")
        if calibrate != "never" and dtype in ("bf16", "fp16", "fp32"):
            self.warning(("kv_cache", "calibrate"), f"calibrate '{calibrate}' has no effect on a {dtype} KV cache",
                         "set `dtype: float8_e4m3` or `calibrate: never`")
        if dtype == "float8_e5m2":  # the schema names SGLang's dtypes; every KV path here stores E4M3
            self.error(("kv_cache", "dtype"), "the FP8 KV cache is float8_e4m3 only (the engine's cache, its "
                       "calibration and the scales SGLang loads)", "set `dtype: float8_e4m3`")
            return
        # a dtype that is not a string is the schema's error to report
        if calibrate == "never" and isinstance(dtype, str) and dtype.startswith("float8"):
            self.warning(("kv_cache", "dtype"), "an FP8 KV cache that is never calibrated keeps scales of 1.0 "
                         "(SGLang's default): keys and values beyond the format's range saturate",
                         "set `calibrate: every_weight_update` (FP8-RL) or `once`")


def _patterns(value: Any) -> list[str]:
    return [pattern for _, pattern in _indexed(value)]


def _indexed(value: Any) -> Iterator[tuple[int, str]]:
    if isinstance(value, str):
        yield 0, value
    elif isinstance(value, list):
        yield from ((i, v) for i, v in enumerate(value) if isinstance(v, str))


def check_data(data: dict, source_map: SourceMap) -> list[Diagnostic]:
    """Every meaning problem in merged policy data."""
    return _Checker(data, source_map).run()


def check_built(policy: Policy, source_map: SourceMap) -> list[Diagnostic]:
    """Checks that compare whole rule sets of a built policy."""
    found: list[Diagnostic] = []
    correction = policy.correction.importance_sampling
    if correction is not None and not policy.kv_cache.is_fp8:
        train, rollout = (tuple(_numerics(r) for r in policy.rules_for(p)) for p in PHASES)
        if train == rollout:
            path = ("correction", "importance_sampling")
            found.append(source_map.diagnostic(
                path, "train and rollout rules give every module the same numerics (and the KV cache is not "
                "FP8): importance sampling has nothing to correct", severity="warning",
                hint="remove `correction`, or keep it if your rollout engine's kernels differ from training's"))
    return found + _batch_variant_kernels(policy, source_map)


def _batch_variant_kernels(policy: Policy, source_map: SourceMap) -> list[Diagnostic]:
    """`numerics.batch_invariant: true` promises bitwise rollout == training; a kernel that picks its algorithm
    by the number of rows (the kernel table, `numerics.capabilities`, says which) cannot keep it, so the two
    settings contradict each other."""
    if not policy.numerics.batch_invariant:
        return []
    paths = {}
    for rule_set in dict.fromkeys(policy.phases.values()):
        for i, rule in enumerate(policy.rule_sets[rule_set]):
            if rule.linear is None or forward_batch_invariant(rule.linear.kernel, batch_invariant=True):
                continue
            sets_own_kernel = "kernel" in policy.resolved["rules"][rule_set][i]["linear"]
            path = ("rules", rule_set, i, "linear", "kernel") if sets_own_kernel else ("kernel",)
            paths.setdefault(path, rule.linear.kernel.value)
    return [
        source_map.diagnostic(
            path, f"kernel '{kernel}' picks its algorithm by the number of rows, so it is not batch-invariant, "
            "but numerics.batch_invariant is true (rollout and training logprobs would not be bitwise equal)",
            hint="use kernel: auto or triton, or set numerics.batch_invariant: false for cuBLAS speed without "
            "bitwise identity")
        for path, kernel in paths.items()
    ]


def _numerics(rule) -> tuple:
    """A rule without its label and location: what it does, for comparing rule sets."""
    return rule.match, rule.types, rule.compute, rule.linear

