"""Pattern semantics: exact, glob (`*` crosses dots), `re:` fullmatch; types; first match is the caller's."""

from __future__ import annotations

import pytest

from precision_engine.policy import compile_pattern, rule_matches
from precision_engine.policy.matching import pattern_error
from precision_engine.policy.model import Rule

NAME = "model.layers.0.self_attn.q_proj"


@pytest.mark.parametrize("pattern,name,expected", [
    ("lm_head", "lm_head", True),
    ("lm_head", "model.lm_head", False),
    ("*.q_proj", NAME, True),  # glob `*` crosses dots
    ("model.layers.*.mlp.*", "model.layers.3.mlp.up_proj", True),
    ("model.layers.?.self_attn.q_proj", NAME, True),
    ("model.layers.[12].self_attn.q_proj", NAME, False),
    ("*Q_PROJ", NAME, False),  # case-sensitive
    ("re:.*_proj", NAME, True),
    ("re:_proj", NAME, False),  # fullmatch, not search
    ("re:model", NAME, False),  # fullmatch, not re.match
    ("re:.*mlp\\.gate", "model.layers.0.mlp.gate", True),
    ("re:.*mlp\\.gate", "model.layers.0.mlp.gate_proj", False),  # router vs dense gate
])
def test_pattern(pattern, name, expected):
    assert compile_pattern(pattern)(name) is expected


def test_invalid_regex_is_described():
    assert pattern_error("re:(") .startswith("invalid regex '(':")
    assert pattern_error("*(") is None  # globs have no syntax errors


def test_rule_matches_names_and_types():
    by_name = Rule(match=("re:.*_proj",), types=("Linear",))
    assert rule_matches(by_name, NAME, "Linear")
    assert not rule_matches(by_name, NAME, "Fp8Linear")
    by_type = Rule(match=(), types=("Embedding",))
    assert rule_matches(by_type, "model.embed_tokens", "Embedding")
    assert not rule_matches(by_type, "lm_head", "Linear")


def test_each_pattern_is_compiled_once_however_many_a_policy_has():
    """A policy with more patterns than a bounded cache holds recompiled every one for every module (minutes
    of `plan` at 5,000 patterns); compiling the plan now compiles each distinct pattern once."""
    from precision_engine.compile import compile_plan
    from precision_engine.models.loader import load_inventory
    from precision_engine.policy import load_policy

    patterns = ", ".join(f'"re:.*x{i:05d}(a|b)*c"' for i in range(5000))
    policy = load_policy("bf16_baseline", overrides=(f"rules.bf16=[{{match: [{patterns}], compute: fp32}}, "
                                                     "{match: '*'}]",))
    compile_pattern.cache_clear()
    plan = compile_plan(policy, load_inventory("tiny-llama"))
    assert compile_pattern.cache_info().misses == 5001 and len(plan.phases["train"].modules) > 10
