"""Policies built directly from the policy dataclasses, so compiler tests do not depend on YAML parsing."""

from precision_engine.numerics.formats import PRESET_FORMATS, LinearSpec
from precision_engine.policy.model import Policy, Rule, SourceLocation

JET_SPEC = LinearSpec(
    weight=PRESET_FORMATS["fp8_block_weight"],
    input=PRESET_FORMATS["fp8_group_act"],
    grad_output=PRESET_FORMATS["fp8_group_act"],
    wgrad_operands=PRESET_FORMATS["fp8_group_tokens"],
)
W8A8 = LinearSpec(weight=PRESET_FORMATS["fp8_block_weight"], input=PRESET_FORMATS["fp8_group_act"])
KEEP_BF16 = ("re:.*embed_tokens", "lm_head", "re:.*norm", "re:.*mlp\\.gate")


def rule(label: str, *match: str, line: int = 1, **kwargs) -> Rule:
    return Rule(tuple(match), label=label, location=SourceLocation("p.yaml", line, 5), **kwargs)


def make_policy(rule_sets: dict, phases: dict, **kwargs) -> Policy:
    return Policy(name=kwargs.pop("name", "test"), version=1, formats={}, rule_sets=rule_sets, phases=phases, **kwargs)
