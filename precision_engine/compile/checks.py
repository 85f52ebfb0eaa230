"""Checks that need a model: rules that match nothing or never win, FP8 tiles that do not fit a shape, and FP8
modules the kernels cannot run in their phase (the kernel table, `numerics.capabilities`).

These complement the policy loader's checks (which need no model) and feed `precision validate --model`.
"""

from __future__ import annotations

from collections import defaultdict

from precision_engine.compile.plan import PHASES_WITH_BACKWARD, compile_plan, first_match
from precision_engine.compile.render import collapse_names
from precision_engine.models.inventory import ModelInventory, ModuleInfo, ModuleKind
from precision_engine.numerics.capabilities import linear_problems
from precision_engine.numerics.formats import Axis, Granularity, LinearSpec, QuantFormat
from precision_engine.policy.diagnostics import Diagnostic, did_you_mean
from precision_engine.policy.matching import rule_matches
from precision_engine.policy.model import Policy, Rule

ROLLOUT = "rollout"  # the phase whose weights the rollout engine loads (weight sync, export)


def _at(rule: Rule, severity: str, message: str, *, hint: str = "", key: str = "match") -> Diagnostic:
    loc = rule.location
    return Diagnostic(
        severity,
        message,
        file=loc.file if loc else None,
        line=loc.line if loc else None,
        column=loc.column if loc else None,
        key_path=f"rules.{rule.label}.{key}" if rule.label else "",
        hint=hint,
    )


def _rule_sets_in_use(policy: Policy) -> dict[str, tuple[Rule, ...]]:
    """Each rule set a phase uses, once (train and rollout often share one)."""
    return {name: policy.rule_sets[name] for name in dict.fromkeys(policy.phases.values())}


def _shadow_and_reach(policy: Policy, inventory: ModelInventory) -> list[Diagnostic]:
    found = []
    example = next((m.name for m in inventory.modules if m.kind.is_gemm), "model.layers.0.self_attn.q_proj")
    for rules in _rule_sets_in_use(policy).values():
        winners = {id(rule): [] for rule in rules}
        for module in inventory.modules:
            rule = first_match(rules, module)
            if rule is not None:
                winners[id(rule)].append(module)
        for rule in rules:
            matched = [m for m in inventory.modules if rule_matches(rule, m.name, m.type)]
            if not matched:
                found.append(_matches_nothing(rule, inventory, example))
            elif not winners[id(rule)]:
                found.append(
                    _at(rule, "warning", "never applies: every module it matches is taken by an earlier rule")
                )
            elif rule.linear is not None:
                found.extend(_linear_overreach(rule, winners[id(rule)]))
    return found


def _matches_nothing(rule: Rule, inventory: ModelInventory, example: str) -> Diagnostic:
    """Blames `types` when no module has any of its classes (a typo there is not a `match` problem)."""
    classes = sorted({m.type for m in inventory.modules})
    if rule.types and not set(rule.types).intersection(classes):
        return _at(rule, "warning", f"no module of {inventory.model_id} is a {' or '.join(rule.types)}",
                   hint=did_you_mean(rule.types[0], classes) or f"its classes: {', '.join(classes)}", key="types")
    return _at(rule, "warning", f"matches no module of {inventory.model_id}",
               hint=f"module names look like '{example}'; `precision plan --model` lists them")


def _linear_overreach(rule: Rule, won: list[ModuleInfo]) -> list[Diagnostic]:
    """A `linear` rule that also decides norms/embeddings: they stay unquantized, which is rarely meant."""
    non_gemm = [m for m in won if not m.kind.is_gemm]
    if not non_gemm:
        return []
    kinds = sorted({m.kind.value for m in non_gemm})
    names = ", ".join(collapse_names([m.name for m in non_gemm])[:3])
    return [
        _at(
            rule,
            "warning",
            f"a `linear` rule matches {len(non_gemm)} {'/'.join(kinds)} module(s) ({names}); "
            f"they run unquantized in {rule.linear.compute.value}",
            hint="narrow the pattern, add `types: [Linear]`, or put a `compute` rule for them first",
        )
    ]


def _misfits(fmt: QuantFormat | None, role: str, n: int, k: int) -> str | None:
    """Why `fmt` does not tile the [N, K] weight of a GEMM (or its [tokens, K] / [tokens, N] operands)."""
    if fmt is None or not fmt.is_quantized:
        return None
    if n < 1 or k < 1:  # one message for every role, so the module is reported once
        return f"the [N, K] = [{n}, {k}] weight is empty (an FP8 GEMM needs N, K >= 1)"
    if fmt.granularity is Granularity.BLOCK:
        rows, cols = fmt.block
        if n % rows or k % cols:
            return f"{role} blocks {rows}x{cols} do not tile the [N, K] = [{n}, {k}] weight"
    if fmt.granularity is Granularity.GROUP and fmt.axis is Axis.K:
        # input: groups along K of x [tokens, K]; grad_output: along N of dy [tokens, N] (the dgrad reduction)
        dim, label = (k, "K") if role == "input" else (n, "N")
        if dim % fmt.group:
            return f"{role} groups of {fmt.group} do not divide {label} = {dim}"
    return None


def _operands(spec: LinearSpec) -> tuple[tuple[str, QuantFormat | None], ...]:
    # wgrad operands group along tokens, a run-time count the quantizer pads: nothing to check here.
    return (("weight", spec.weight), ("input", spec.input), ("grad_output", spec.grad_output))


def _tile_errors(policy: Policy, inventory: ModelInventory) -> list[Diagnostic]:
    # (rule label, problem) -> modules, so 32 layers with the same shape give one error, not 32
    problems: dict[tuple[str, str], list[str]] = defaultdict(list)
    rules: dict[str, Rule] = {}
    for rule_set in _rule_sets_in_use(policy).values():
        for module in inventory.modules:
            rule = first_match(rule_set, module)
            if rule is None or rule.linear is None or not module.kind.is_gemm:
                continue
            rules[rule.label] = rule
            # a format the GEMMs do not take at all is reported once, by _capability_errors, not per shape
            refused = {p.operand for p in linear_problems(rule.linear, backward=True)}
            for param, (n, k) in module.gemm_weights:
                for role, fmt in _operands(rule.linear):
                    if role in refused:
                        continue
                    problem = _misfits(fmt, role, n, k)
                    if problem:
                        where = module.name if param == "weight" else f"{module.name}.{param}"
                        if where not in problems[(rule.label, problem)]:
                            problems[(rule.label, problem)].append(where)
    return [
        _at(
            rules[label],
            "error",
            f"{problem} of {', '.join(collapse_names(names))}",
            key="linear",
            hint="use a size that divides the shape (128 fits every built-in model) or exclude these modules",
        )
        for (label, problem), names in problems.items()
    ]


def _capability_errors(policy: Policy, inventory: ModelInventory) -> list[Diagnostic]:
    """FP8 modules the kernels cannot run in a phase that uses the rule: what `check`, `export` and training
    would refuse, reported here first, at the rule."""
    problems: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)  # (label, key, message, hint)
    rules = {rule.label: rule for rule_set in policy.rule_sets.values() for rule in rule_set}
    for phase, phase_plan in compile_plan(policy, inventory).phases.items():
        for planned in phase_plan.modules:
            if planned.linear is None:
                continue
            found = linear_problems(planned.linear, backward=phase in PHASES_WITH_BACKWARD,
                                    experts=planned.module.kind is ModuleKind.EXPERTS, exported=phase == ROLLOUT)
            for problem in found:
                key = "linear" if problem.operand == "module" else f"linear.{problem.operand}"
                message = f"{problem.message} in the {phase} phase" if problem.operand == "module" else problem.message
                names = problems[(planned.rule, key, message, problem.hint)]
                if planned.module.name not in names:
                    names.append(planned.module.name)
    return [
        _at(rules[label], "error", f"{message}: {', '.join(collapse_names(names))}", key=key, hint=hint)
        for (label, key, message, hint), names in problems.items()
    ]


def model_diagnostics(policy: Policy, inventory: ModelInventory) -> list[Diagnostic]:
    """Every model-dependent problem of `policy`, sorted by location."""
    found = _shadow_and_reach(policy, inventory) + _tile_errors(policy, inventory)
    found += _capability_errors(policy, inventory)
    return sorted(found, key=Diagnostic.sort_key)
