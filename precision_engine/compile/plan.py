"""The plan: a policy resolved against a model, one decision per module per phase.

Resolution is first-match: each module gets the first rule of the phase's rule set that matches its name or
type. Modules no rule matches keep the bf16 compute dtype (`rule` None, shown as "(default)"). A `linear`
rule quantizes only GEMM modules (linears and fused experts); a norm or embedding it happens to match runs
unquantized in the rule's compute dtype, and `model_diagnostics` reports the overreach.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from precision_engine.models.inventory import ModelInventory, ModuleInfo
from precision_engine.numerics.capabilities import forward_batch_invariant
from precision_engine.numerics.formats import DType, LinearSpec
from precision_engine.policy.matching import rule_matches
from precision_engine.policy.model import Policy, Rule

DEFAULT_COMPUTE = DType.BF16
PHASES_WITH_BACKWARD = frozenset({"train"})


@dataclass(frozen=True)
class ModulePlan:
    module: ModuleInfo
    rule: str | None  # the label of the rule that decided it; None: no rule matched
    compute: DType
    linear: LinearSpec | None = None  # GEMM modules under a `linear` rule that quantizes; kernel resolved

    @property
    def is_fp8(self) -> bool:
        """The forward GEMM runs on FP8 operands."""
        return self.linear is not None and self.linear.forward_is_fp8

    @property
    def forward_numerics(self) -> tuple:
        """Everything that decides the forward output's bits (apart from batch invariance)."""
        if self.linear is None:
            return (None, None, self.compute, None)
        return (self.linear.weight, self.linear.input, self.linear.compute, self.linear.kernel)

    def numerics(self, phase: str) -> tuple:
        """What decides this module's bits in `phase` (the rule label is provenance, not numerics).

        Rollout runs no backward pass, so only training compares the grad_output and wgrad formats.
        """
        if phase not in PHASES_WITH_BACKWARD or self.linear is None:
            return self.forward_numerics
        return self.forward_numerics + (self.linear.grad_output, self.linear.wgrad_operands, self.linear.wgrad_x)


@dataclass(frozen=True)
class PhasePlan:
    phase: str
    modules: tuple[ModulePlan, ...]
    by_name: Mapping[str, ModulePlan] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", MappingProxyType({p.module.name: p for p in self.modules}))

    def fp8_flop_share(self) -> float:
        """Share of the GEMM FLOPs per token (linears and experts) whose forward runs in FP8; 0.0 for no GEMMs.

        The MoE router is a GEMM too but no `linear` rule may quantize it, so it is not counted.
        """
        gemms = [p for p in self.modules if p.module.kind.is_gemm]
        total = sum(p.module.flops_per_token for p in gemms)
        fp8 = sum(p.module.flops_per_token for p in gemms if p.is_fp8)
        return fp8 / total if total else 0.0


@dataclass(frozen=True)
class Plan:
    policy: Policy
    inventory: ModelInventory
    phases: Mapping[str, PhasePlan]

    def __post_init__(self) -> None:
        object.__setattr__(self, "phases", MappingProxyType(dict(self.phases)))

    def fp8_flop_share(self, phase: str) -> float:
        return self.phases[phase].fp8_flop_share()

    def identical(self, name: str) -> bool:
        """Whether module `name` computes the same bits in the training forward pass as in rollout.

        Equal formats, compute dtype and kernel are not enough: training runs a GEMM with M = batch*seq rows
        while decode runs M = batch, and a kernel that picks its tiling or split-K by M sums the same products
        in a different order. Only a batch-invariant forward (the kernel table, `numerics.capabilities`, decides:
        `numerics.batch_invariant` for AUTO and unquantized modules, the kernel's own row otherwise) gives a row
        the same bits at any M, which is what makes rollout logprobs equal the trainer's. On the built-in backend
        an all-identical plan therefore covers decode through the KV cache (the engine's attention kernel gives a
        decode step the bits of the training forward's row), and an FP8 KV cache too (the trainer rounds k/v with
        the rollout's scales); `precision check`'s sampled row measures it. verl/SGLang is not covered.
        """
        if not {"train", "rollout"} <= self.phases.keys():
            return False
        train = self.phases["train"].by_name[name]
        rollout = self.phases["rollout"].by_name[name]
        kernel = train.linear.kernel if train.linear is not None else None
        return train.forward_numerics == rollout.forward_numerics and forward_batch_invariant(
            kernel, self.policy.numerics.batch_invariant
        )

    def differing(self) -> tuple[str, ...]:
        """Modules whose training-forward and rollout numerics differ (all of them without batch invariance)."""
        return tuple(m.name for m in self.inventory.modules if not self.identical(m.name))

    @property
    def all_identical(self) -> bool:
        return not self.differing()


def first_match(rules: tuple[Rule, ...], module: ModuleInfo) -> Rule | None:
    return next((rule for rule in rules if rule_matches(rule, module.name, module.type)), None)


def _quantizes(spec: LinearSpec) -> bool:
    operands = (spec.weight, spec.input, spec.grad_output, spec.wgrad_operands, spec.wgrad_input)
    return any(fmt is not None and fmt.is_quantized for fmt in operands)


def _plan_module(module: ModuleInfo, rule: Rule | None) -> ModulePlan:
    if rule is None:
        return ModulePlan(module, None, DEFAULT_COMPUTE)
    if rule.linear is None or not module.kind.is_gemm or not _quantizes(rule.linear):
        # A spec that quantizes no operand is a plain GEMM in its compute dtype, and plans (and diffs) say so.
        compute = rule.linear.compute if rule.linear is not None else rule.compute
        return ModulePlan(module, rule.label, compute)
    # The policy-wide `kernel` was filled in when the policy was built, so an explicit `kernel: auto` stays auto.
    return ModulePlan(module, rule.label, rule.linear.compute, rule.linear)


def compile_plan(policy: Policy, inventory: ModelInventory) -> Plan:
    """Resolve every module of `inventory` under every phase of `policy`."""
    phases = {}
    for phase in policy.phases:
        rules = policy.rules_for(phase)
        modules = tuple(_plan_module(m, first_match(rules, m)) for m in inventory.modules)
        phases[phase] = PhasePlan(phase, modules)
    return Plan(policy, inventory, phases)
