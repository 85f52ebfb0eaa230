"""Apply one phase of a compiled plan to a live transformers model, in place.

The swap follows torchao's `swap_linear_layers`: walk `named_children` post-order, build each fully qualified
name, ask a filter, `setattr` the new module on its parent. `Fp8Linear.from_linear` shares the `weight` /
`bias` Parameters, so nothing is copied, state_dict keys do not change, and an optimizer built before the
rewrite keeps updating the very tensors the FP8 forward quantizes. That is also why it works on meta, CPU and
CUDA models alike and on models in train mode with requires_grad set: only module objects change.

Applying a phase makes the model match that phase exactly: planned FP8 linears become `Fp8Linear` (or are
rebuilt when their spec or numerics differ, e.g. train -> rollout of a policy whose phases differ), modules the
plan keeps in the compute dtype go back to `nn.Linear`. Applying the same phase twice changes nothing; `restore`
undoes every swap. Parameters are never cast: master weights keep their dtype and the compute dtype is the
forward's business (autocast or a bf16 model), as in torchao.

Fused MoE experts (3-D weights, transformers 5 `*Experts`) become `Fp8Experts` in the rollout phase (FP8-RL's
W8A8 experts); FP8 experts in the train phase and FP8 routers are refused with `UnsupportedError` naming the
modules: there is no grouped FP8 backward yet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from torch import nn

from precision_engine.errors import ModelError, UnsupportedError, UsageError
from precision_engine.models.inventory import ModuleKind
from precision_engine.numerics.capabilities import linear_problems
from precision_engine.numerics.formats import DType, LinearSpec
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.specs import KVCacheSpec, NumericsSpec
from precision_engine.rewrite.experts import Fp8Experts, is_fused_experts

ROLLOUT = "rollout"  # the only phase FP8 experts may run in (forward only)
_REWRITTEN = (Fp8Linear, Fp8Experts)
_KV_CACHE_ATTR = "precision_kv_cache"  # the KVCacheSpec of the policy `apply` last gave the model

ModuleFilter = Callable[[nn.Module, str], bool]


@dataclass(frozen=True)
class RewriteReport:
    """What the model runs after `apply`: FP8 GEMM modules (linears, fused experts) with their spec, the rest
    in their compute dtype.

    `changed` lists the modules this call replaced (empty when the model already matched the phase).
    """

    phase: str
    linears: Mapping[str, LinearSpec]
    compute: Mapping[str, DType]
    changed: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "linears", MappingProxyType(dict(self.linears)))
        object.__setattr__(self, "compute", MappingProxyType(dict(self.compute)))

    @classmethod
    def from_plan(cls, phase: str, phase_plan) -> RewriteReport:
        """The report a faithful rewrite of `phase_plan` produces."""
        return cls(
            phase,
            {m.module.name: m.linear for m in phase_plan.modules if m.is_fp8},
            {m.module.name: m.compute for m in phase_plan.modules if not m.is_fp8},
        )

    def matches(self, phase_plan) -> bool:
        expected = RewriteReport.from_plan(self.phase, phase_plan)
        return dict(self.linears) == dict(expected.linears) and dict(self.compute) == dict(expected.compute)

    def summary(self) -> str:
        return (
            f"{self.phase}: {len(self.linears)} FP8 linears, {len(self.compute)} modules in their compute dtype, "
            f"{len(self.changed)} replaced"
        )


# nn.Module's hook registries: a swapped-in module takes over the very dicts, so hooks fire and handles still
# remove them (a RemovableHandle refers to its dict).
_HOOKS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
          "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks", "_is_full_backward_hook",
          "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")


def swap_modules(model: nn.Module, swap: Callable[[nn.Module, str], nn.Module], *, module_filter_fn: ModuleFilter):
    """Post-order walk; where `module_filter_fn(module, fqn)` holds, `swap(module, fqn)` replaces the module,
    which keeps its hooks. A module whose `forward` was replaced on the instance (accelerate's device-map hooks
    do this) is refused: the new module would silently run without it."""
    targets = []  # (parent, name, child, fqn), children before their parents

    def visit(parent: nn.Module, prefix: str) -> None:
        for name, child in list(parent.named_children()):
            fqn = f"{prefix}.{name}" if prefix else name
            visit(child, fqn)
            if module_filter_fn(child, fqn):
                targets.append((parent, name, child, fqn))

    visit(model, "")
    for _, _, child, fqn in targets:  # before anything is swapped: never half a rewrite
        if "forward" in vars(child):
            raise UnsupportedError(f"{fqn}: its forward is replaced on the instance (accelerate's device-map "
                                   "dispatch does this), which the rewrite would drop (hint: rewrite the model "
                                   "before dispatching it)")
    replaced = []
    for parent, name, child, fqn in targets:
        new = swap(child, fqn)
        if new is not child:
            new.train(child.training)
            for hooks in _HOOKS:
                setattr(new, hooks, getattr(child, hooks))
            setattr(parent, name, new)
            replaced.append(fqn)
    return tuple(replaced)


def apply(plan, model: nn.Module, phase: str, *, numerics: NumericsSpec | None = None) -> RewriteReport:
    """Make `model` run `phase` of `plan`; returns a report that `matches(plan.phases[phase])`."""
    if phase not in plan.phases:
        raise UsageError(f"unknown phase {phase!r}; the plan has {', '.join(plan.phases)}")
    phase_plan = plan.phases[phase]
    numerics = numerics or _plan_numerics(plan)
    wanted = {m.module.name: m.linear for m in phase_plan.modules if m.is_fp8}
    _check_against_model(model, phase, phase_plan, wanted)

    def needs_change(module: nn.Module, fqn: str) -> bool:
        if fqn in wanted:
            return not (
                isinstance(module, _REWRITTEN) and module.spec == wanted[fqn] and module.numerics == numerics
            )
        return isinstance(module, _REWRITTEN)  # planned in the compute dtype, or not in the plan at all

    def swap(module: nn.Module, fqn: str) -> nn.Module:
        original = _original(module)
        if fqn not in wanted:
            return original
        if isinstance(original, nn.Linear):
            return Fp8Linear.from_linear(original, wanted[fqn], numerics=numerics)
        return Fp8Experts(original, wanted[fqn], numerics=numerics)

    changed = swap_modules(model, swap, module_filter_fn=needs_change)
    report = RewriteReport(phase, _fp8_specs(model), _compute_modules(phase_plan, wanted), changed)
    if not report.matches(phase_plan):  # a bug here, never a user error: say what differs
        raise AssertionError(f"rewrite of phase {phase!r} does not match its plan: {report.summary()}")
    setattr(model, _KV_CACHE_ATTR, getattr(getattr(plan, "policy", None), "kv_cache", None))
    return report


def applied_kv_cache(model: nn.Module) -> KVCacheSpec | None:
    """The KV cache format of the policy `apply` last gave `model` (None if none was applied, or after `restore`):
    a rollout engine checks its cache against it, since the model's linears alone do not say it."""
    return getattr(model, _KV_CACHE_ATTR, None)


def invalidate_weight_caches(model: nn.Module) -> int:
    """Drop every cached Q(W) in `model`, so the next forward re-quantizes the current weights; returns how many
    modules it reset. The trainer calls it after every optimizer step (fused optimizers write the weights
    without a trace the caches could see; see numerics.linear)."""
    rewritten = [m for m in model.modules() if isinstance(m, _REWRITTEN)]
    for module in rewritten:
        module.invalidate_weight_cache()
    return len(rewritten)


def restore(model: nn.Module) -> tuple[str, ...]:
    """Undo every rewrite (back to nn.Linear / the experts module, same Parameters); returns their names."""
    setattr(model, _KV_CACHE_ATTR, None)
    return swap_modules(model, lambda m, _: _original(m), module_filter_fn=lambda m, _: isinstance(m, _REWRITTEN))


def _original(module: nn.Module) -> nn.Module:
    if isinstance(module, Fp8Linear):
        return module.to_linear()
    if isinstance(module, Fp8Experts):
        return module.to_experts()
    return module


def _plan_numerics(plan) -> NumericsSpec:
    policy = getattr(plan, "policy", None)
    return getattr(policy, "numerics", None) or NumericsSpec()


def _fp8_specs(model: nn.Module) -> dict[str, LinearSpec]:
    return {name: m.spec for name, m in model.named_modules() if isinstance(m, _REWRITTEN)}


def _compute_modules(phase_plan, wanted: Mapping[str, LinearSpec]) -> dict[str, DType]:
    return {m.module.name: m.compute for m in phase_plan.modules if m.module.name not in wanted}


def _check_against_model(model: nn.Module, phase: str, phase_plan, wanted: Mapping[str, LinearSpec]) -> None:
    """Refuse before touching anything: unsupported kinds, names the model lacks, shapes that differ."""
    kinds = {name: phase_plan.by_name[name].module.kind for name in wanted}
    routers = [name for name, kind in kinds.items() if kind is ModuleKind.ROUTER]
    if routers:
        raise UnsupportedError(f"FP8 MoE routers are not supported: {_names(routers)} (hint: keep them in bf16)")
    experts = [name for name, kind in kinds.items() if kind is ModuleKind.EXPERTS]
    if experts and phase != ROLLOUT:
        raise UnsupportedError(
            f"FP8 fused MoE experts run in the rollout phase only (no grouped FP8 backward yet); phase {phase!r} "
            f"quantizes {_names(experts)} (hint: a `compute: bf16` rule for experts in the {phase} rule set)"
        )
    by_name = dict(model.named_modules())
    missing = [name for name in wanted if name not in by_name]
    if missing:
        raise ModelError(f"the plan names modules this model does not have: {_names(missing)}")
    unplanned = [name for name in _gemm_modules(model) if name not in phase_plan.by_name]
    if unplanned:  # left in BF16 unreported, and an export would not list them as unquantized
        raise ModelError(f"the plan was compiled for another model: it does not know {_names(unplanned)} "
                         "(hint: compile the plan from this model's config)")
    refused = {name: problems[0] for name, spec in wanted.items() if kinds[name] is not ModuleKind.EXPERTS
               for problems in [linear_problems(spec, backward=True)] if problems}
    if refused:  # Fp8Linear would refuse them one by one, after the modules before them were swapped
        problem = next(iter(refused.values()))
        raise UnsupportedError(f"{_names(list(refused))}: {problem.message} (hint: {problem.hint})")
    for name in wanted:
        module = by_name[name]
        if kinds[name] is ModuleKind.EXPERTS:
            if not (isinstance(module, Fp8Experts) or is_fused_experts(module)):
                raise UnsupportedError(f"{name}: {type(module).__name__} is not a fused-experts layout it can run")
            shape = tuple(module.gate_up_proj.shape)
        elif isinstance(module, (nn.Linear, Fp8Linear)):
            shape = tuple(module.weight.shape)
        else:
            raise ModelError(f"{name} is a {type(module).__name__}, the plan expects a linear layer")
        planned = tuple(phase_plan.by_name[name].module.weight_shape)
        if shape != planned:
            raise ModelError(
                f"{name}: weight is {shape}, the plan was compiled for {planned} "
                "(hint: compile the plan from this model's config)"
            )


def _gemm_modules(model: nn.Module) -> list[str]:
    """The names of the model's linear layers and fused-experts modules, not counting the ones a rewrite holds."""
    names, inside = [], None  # named_modules walks in pre-order: a rewritten module's insides follow it
    for name, module in model.named_modules():
        if inside and name.startswith(inside):
            continue
        if isinstance(module, _REWRITTEN):
            inside = f"{name}."
        if isinstance(module, (nn.Linear, *_REWRITTEN)) or is_fused_experts(module):
            names.append(name)
    return names


def _names(names: list[str], limit: int = 6) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
