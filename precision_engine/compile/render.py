"""Plans and diffs for people (rich tables) and for machines (JSON-ready dicts).

Repeated layers are collapsed: modules whose names differ only in their numeric components and whose rows
are otherwise equal print once, as `model.layers.{0..31}.self_attn.q_proj` with a count, so an 8B plan is
a dozen rows rather than three hundred.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from precision_engine.compile.diff import PlanDiff, PolicyDiff
from precision_engine.compile.plan import PHASES_WITH_BACKWARD, ModulePlan, Plan
from precision_engine.models.inventory import ModuleInfo, ModuleKind

if TYPE_CHECKING:
    from rich.console import Console

_NUMBER = re.compile(r"(?<=\.)\d+(?=\.|$)")


def _ranges(values: Iterable[int]) -> str:
    """{0..31}, {0,1} or {0,2..5}: sorted integers as runs."""
    runs: list[list[int]] = []
    for value in sorted(set(values)):
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    text = (str(lo) if lo == hi else f"{lo},{hi}" if hi == lo + 1 else f"{lo}..{hi}" for lo, hi in runs)
    return "{" + ",".join(text) + "}"


def collapse(rows: Sequence[tuple[str, Hashable]]) -> list[tuple[str, int, Hashable]]:
    """(name, row key) pairs -> (collapsed name, count, row key), in first-seen order.

    Names group when they share a template (numbers replaced) and a row key. A group prints as one name only
    when it is the full product of its index sets, so `{0..3}.experts.{0..7}` never claims an absent module.
    """
    groups: dict[tuple, list[tuple[int, ...]]] = {}
    names: dict[tuple, list[str]] = {}
    for name, key in rows:
        template = _NUMBER.sub("{}", name)
        indices = tuple(int(n) for n in _NUMBER.findall(name))
        groups.setdefault((template, key), []).append(indices)
        names.setdefault((template, key), []).append(name)
    out = []
    for (template, key), members in groups.items():
        positions = list(zip(*members, strict=True)) if members[0] else []
        product = 1
        for values in positions:
            product *= len(set(values))
        if len(members) == 1 or not positions or product != len(set(members)):
            out.extend((name, 1, key) for name in names[(template, key)])
            continue
        out.append((template.format(*(_ranges(values) for values in positions)), len(members), key))
    return out


def collapse_names(names: Sequence[str]) -> list[str]:
    return [name for name, _, _ in collapse([(name, None) for name in names])]


def shape_label(module: ModuleInfo) -> str:
    """[N, K] of a linear as NxK; fused experts as E x (each GEMM's NxK) and top-k."""
    if module.kind is ModuleKind.EXPERTS:
        gemms = " | ".join(f"{n}x{k}" for _, (n, k) in module.gemm_weights)
        return f"{module.num_experts}x[{gemms}] top{module.experts_per_token}"
    return "x".join(str(d) for d in module.weight_shape)


def _fmt(fmt, compute) -> str:
    return fmt.describe() if fmt is not None else compute.value


def _wgrad(spec) -> str:
    """The wgrad's operands: one format for both, or dy's then x's where `wgrad_input` differs."""
    dy = _fmt(spec.wgrad_operands, spec.compute)
    return dy if spec.wgrad_input in (None, spec.wgrad_operands) else f"dY {dy}, X {spec.wgrad_input.describe()}"


def numerics_label(plan: ModulePlan, phase: str) -> str:
    """One line naming every format a module uses in `phase`: 'W e4m3 128x128 · X e4m3 1x128 · ...'."""
    if plan.linear is None:
        return f"{plan.compute.value} (not quantized)"
    spec = plan.linear
    parts = [f"W {_fmt(spec.weight, spec.compute)}", f"X {_fmt(spec.input, spec.compute)}"]
    if phase in PHASES_WITH_BACKWARD:
        parts += [f"dY {_fmt(spec.grad_output, spec.compute)}", f"wgrad {_wgrad(spec)}"]
    return " · ".join(parts + [spec.compute.value, spec.kernel.value])


def _row(plan: Plan, phase: str, mp: ModulePlan) -> tuple[str, ...]:
    spec = mp.linear
    cells = [
        mp.module.type,
        shape_label(mp.module),
        _fmt(spec.weight, spec.compute) if spec else mp.compute.value,
        _fmt(spec.input, spec.compute) if spec else mp.compute.value,
    ]
    if phase in PHASES_WITH_BACKWARD:
        cells += [
            _fmt(spec.grad_output, spec.compute) if spec else "-",
            _wgrad(spec) if spec else "-",
        ]
    identical = "yes" if plan.identical(mp.module.name) else "NO"
    cells += [spec.kernel.value if spec else "-", mp.rule or "(default)", identical]
    return tuple(cells)


def phase_table(plan: Plan, phase: str):
    from rich.table import Table
    from rich.text import Text

    phase_plan = plan.phases[phase]
    table = Table(title=f"{phase}: {plan.policy.name} on {plan.inventory.model_id}", title_justify="left")
    headers = ["module", "n", "type", "shape", "weight", "input"]
    if phase in PHASES_WITH_BACKWARD:
        headers += ["grad_output", "wgrad"]
    headers += ["kernel", "rule", "= rollout" if phase == "train" else "= train"]
    for header in headers:
        table.add_column(header, justify="right" if header == "n" else "left", no_wrap=header == "module")
    for name, count, cells in collapse([(mp.module.name, _row(plan, phase, mp)) for mp in phase_plan.modules]):
        *plain, same = (Text(cell) for cell in cells)  # Text: shapes like "[...]" are not rich markup
        same.stylize("green" if same.plain == "yes" else "bold red")
        table.add_row(Text(name), f"x{count}" if count > 1 else "", *plain, same)
    return table


def verdict_lines(plan: Plan) -> list[str]:
    """What the plan promises, as `precision check` measures it (its sampled row: the built-in engine's logprobs
    vs the trainer's). An identical plan is batch-invariant in every module, so on the built-in backend decode
    through the KV cache is covered, and an FP8 KV cache too: the trainer rounds k/v with the rollout's scales
    when the phases are unified (rl.trainer, the decoder's `kv_scales`). verl/SGLang runs its own kernels and
    rounds k/v in rollout only (integrations/sglang/rollout.py), so it never gives the trainer's bits."""
    differing = plan.differing()
    total = len(plan.inventory.modules)
    fp8_kv = plan.policy.kv_cache.is_fp8
    if not differing:
        verdict = f"verdict: training forward and rollout numerics are IDENTICAL for all {total} modules"
        if fp8_kv:
            return [verdict,
                    "  built-in backend: the engine's sampled logprobs, decode through the FP8 KV",
                    "  cache included, equal the trainer's bit for bit: the trainer rounds k/v with",
                    "  the rollout's scales (`precision check` measures it); verl/SGLang does not",
                    "  make them bitwise (its kernels are not ours, it rounds k/v in rollout only)"]
        return [verdict,
                "  built-in backend: the engine's sampled logprobs, decode through the KV cache",
                "  included, equal the trainer's bit for bit (`precision check` measures it);",
                "  verl/SGLang does not make them bitwise (its kernels are not ours)"]
    kv_note = []
    if fp8_kv:
        kv_note = ["  the FP8 KV cache rounds keys and values in rollout only (the phases differ,",
                   "  so the trainer attends to unrounded ones): `precision check` measures the gap"]
    lines = [f"verdict: training forward and rollout numerics DIFFER for {len(differing)} of {total} modules"]
    if not plan.policy.numerics.batch_invariant:
        lines.append("  (numerics.batch_invariant is false: a row's result may depend on the batch size)")
    shown = collapse_names(differing)
    lines += [f"  {name}" for name in shown[:12]]
    if len(shown) > 12:
        lines.append(f"  ... and {len(shown) - 12} more")
    return lines + kv_note


def policy_lines(policy) -> list[str]:
    """What the policy sets beyond the module table: the KV cache, the IS correction, the master weights."""
    kv = policy.kv_cache
    kv_text = "bf16 (not quantized)"
    if kv.is_fp8:
        kv_text = f"{kv.dtype.value}, {kv.scale.value} scales, calibrate: {kv.calibrate.value}"
    is_spec = policy.correction.importance_sampling
    is_text = "off"
    if is_spec is not None:
        is_text = f"{is_spec.level.value}-level importance sampling, {is_spec.mode.value} at {is_spec.threshold:g}"
        if is_spec.mode.value == "mask":
            lower = is_spec.lower_threshold if is_spec.lower_threshold is not None else 1 / is_spec.threshold
            is_text += f" (keep ratios in [{lower:g}, {is_spec.threshold:g}])"
    return [
        f"rollout KV cache: {kv_text}",
        f"correction: {is_text}",
        f"master weights: {policy.master_weights.value}",
    ]


def render_plan(console: Console, plan: Plan, phases: Sequence[str]) -> None:
    for phase in phases:
        console.print(phase_table(plan, phase))
        share = plan.fp8_flop_share(phase)
        console.print(f"{phase}: FP8 share of linear/expert GEMM FLOPs per token: {share:.1%}\n")
    for line in policy_lines(plan.policy) + verdict_lines(plan):
        console.print(line, highlight=False)


def to_data(value: Any) -> Any:
    """Dataclasses, enums and tuples as JSON-ready data."""
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): to_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_data(v) for v in value]
    return value


def plan_to_dict(plan: Plan, phases: Sequence[str]) -> dict:
    def module(mp: ModulePlan) -> dict:
        info = mp.module
        return {
            "name": info.name,
            "type": info.type,
            "kind": info.kind.value,
            "shape": list(info.weight_shape),
            "params": {name: list(shape) for name, shape in info.params},
            "flops_per_token": info.flops_per_token,
            "rule": mp.rule,
            "compute": mp.compute.value,
            "fp8": mp.is_fp8,
            "linear": to_data(mp.linear),
            "identical": plan.identical(info.name),
        }

    return {
        "policy": plan.policy.name,
        "model": plan.inventory.model_id,
        "architecture": plan.inventory.architecture,
        "identical": plan.all_identical,
        "differing": list(plan.differing()),
        "batch_invariant": plan.policy.numerics.batch_invariant,
        "kv_cache": to_data(plan.policy.kv_cache),
        # the built-in trainer rounds k/v like the FP8 cache when the phases are identical (not verl/SGLang)
        "kv_cache_rollout_only": plan.policy.kv_cache.is_fp8 and not plan.all_identical,
        "correction": to_data(plan.policy.correction),
        "master_weights": plan.policy.master_weights.value,
        "phases": {
            phase: {
                "fp8_flop_share": plan.fp8_flop_share(phase),
                "modules": [module(mp) for mp in plan.phases[phase].modules],
            }
            for phase in phases
        },
    }


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def render_policy_diff(console: Console, diff: PolicyDiff, a: str, b: str) -> None:
    if not diff.changes:
        console.print(f"policies {a} and {b}: no differences", highlight=False)
        return
    console.print(f"policy documents ({a} -> {b}):", highlight=False)
    for change in diff.changes:
        note = "  (metadata)" if change.metadata else ""
        if change.kind == "added":
            line = f"  + {change.path}: {_short(change.new)}"
        elif change.kind == "removed":
            line = f"  - {change.path}: {_short(change.old)}"
        else:
            line = f"  ~ {change.path}: {_short(change.old)} -> {_short(change.new)}"
        console.print(line + note, highlight=False, markup=False)
    if diff.equivalent and not all(change.metadata for change in diff.changes):
        console.print("  equivalent: both build the same rules and settings (defaults spelled out, presets for "
                      "identical formats)", highlight=False)


def render_plan_diff(console: Console, diff: PlanDiff, model_id: str) -> None:
    console.print(f"\nplan on {model_id}:", highlight=False)
    for phase, groups in diff.phases.items():
        if not groups:
            console.print(f"  {phase}: no module changes numerics", highlight=False)
            continue
        console.print(f"  {phase}: {diff.changed(phase)} module(s) change numerics", highlight=False)
        for group in groups:
            console.print(f"    {numerics_label(group.old, phase)}", highlight=False, markup=False)
            console.print(f"      -> {numerics_label(group.new, phase)}", highlight=False, markup=False)
            for name in collapse_names(group.names):
                console.print(f"        {name}", highlight=False, markup=False)
    before, after = diff.identical_before, diff.identical_after
    console.print(
        f"  train forward = rollout: {before[0]}/{before[1]} modules -> {after[0]}/{after[1]} modules",
        highlight=False,
    )


def diff_to_dict(policy_diff: PolicyDiff, plan_diff: PlanDiff | None) -> dict:
    data: dict[str, Any] = {
        "same": policy_diff.same and (plan_diff is None or plan_diff.same),
        "policy": [to_data(change) for change in policy_diff.changes],
        "equivalent": policy_diff.equivalent,
    }
    if plan_diff is not None:
        data["plan"] = {
            "phases": {
                phase: [
                    {
                        "old": to_data(group.old.linear) or group.old.compute.value,
                        "new": to_data(group.new.linear) or group.new.compute.value,
                        "old_label": numerics_label(group.old, phase),
                        "new_label": numerics_label(group.new, phase),
                        "modules": list(group.names),
                    }
                    for group in groups
                ]
                for phase, groups in plan_diff.phases.items()
            },
            "identical_before": list(plan_diff.identical_before),
            "identical_after": list(plan_diff.identical_after),
        }
    return data
