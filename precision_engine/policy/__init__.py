"""Precision policies: the YAML DSL, its schema, and the loader that turns a file into a frozen Policy.

    from precision_engine.policy import load_policy
    policy = load_policy("policies/jetrl_unified.yaml", overrides=["kernel=triton"])

Torch-free: `precision validate` imports only this package, PyYAML and jsonschema.
"""

from precision_engine.policy.diagnostics import Diagnostic
from precision_engine.policy.extends import shipped_path, shipped_policies
from precision_engine.policy.loader import CheckResult, check_policy, load_policy, resolve_source, validate_files
from precision_engine.policy.matching import compile_pattern, rule_matches
from precision_engine.policy.model import Policy, Rule
from precision_engine.policy.schema import load_schema, schema_text

__all__ = [
    "CheckResult",
    "Diagnostic",
    "Policy",
    "Rule",
    "check_policy",
    "compile_pattern",
    "load_policy",
    "load_schema",
    "resolve_source",
    "rule_matches",
    "schema_text",
    "shipped_path",
    "shipped_policies",
    "validate_files",
]
