"""Precision policies: the YAML DSL, its schema, and the loader that turns a file into a frozen Policy.

    from precision_engine.policy import load_policy
    policy = load_policy("policies/jetrl_unified.yaml", overrides=["kernel=triton"])

A policy (schema.json, printed by `precision schema`, is the reference for every key):

- `formats`: named operand formats (dtype, granularity tensor/channel/group/block, group or block size, group
  axis k/tokens, fp32 or pow2 scales); rules may also name the presets in numerics.formats.PRESET_FORMATS.
- `rules`: named, ordered rule sets; for each module the first rule whose `match` patterns and `types` fit
  wins (pattern semantics in `matching`). A rule sets `compute` (unquantized dtype) and optionally `linear`:
  a format per GEMM operand (weight, input, grad_output, wgrad_operands, wgrad_input) and a kernel.
- `phases`: the rule set for `train` and for `rollout`; naming the same set means identical numerics.
- `kv_cache`, `correction` (importance sampling), `master_weights`, `kernel`, `numerics`.
- `extends`: shipped names or relative paths, merged as JSON Merge Patch (`extends`); `--set key.path=value`
  applies after it (`overrides`).

Loading never stops at the first problem: `check_policy` returns every Diagnostic (file:line:col, key path,
message, hint), `load_policy` raises PolicyError with all errors. Torch-free: `precision validate` imports
only this package, PyYAML and (when checking) jsonschema.
"""

# Numerics settings live in numerics.specs (the kernels take them); policies build them, so they are here too.
from precision_engine.numerics.specs import Calibrate, KVCacheSpec, KVScale, NonFinite, NumericsSpec
from precision_engine.policy.diagnostics import Diagnostic
from precision_engine.policy.extends import shipped_path, shipped_policies
from precision_engine.policy.loader import CheckResult, check_policy, load_policy, resolve_source, validate_files
from precision_engine.policy.matching import compile_pattern, rule_matches
from precision_engine.policy.model import Policy, Rule
from precision_engine.policy.schema import load_schema, schema_text

__all__ = [
    "Calibrate",
    "CheckResult",
    "Diagnostic",
    "KVCacheSpec",
    "KVScale",
    "NonFinite",
    "NumericsSpec",
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
