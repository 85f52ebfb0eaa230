"""schema.json is valid draft 2020-12, and its defaults are the ones the builder uses."""

from __future__ import annotations

from pathlib import Path

from jsonschema import Draft202012Validator

from precision_engine.numerics.formats import QuantFormat
from precision_engine.policy import check_policy, load_schema
from precision_engine.policy.model import ImportanceSampling, KVCacheSpec, NumericsSpec, Policy
from precision_engine.policy.schema import check_structure
from precision_engine.policy.yaml_source import parse_yaml

POLICIES = Path(__file__).resolve().parents[2] / "policies"


def test_schema_is_valid_draft_2020_12():
    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def _described(node, path="") -> list[str]:
    """Paths of properties without a description (editors show these on completion)."""
    missing = []
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            if "description" not in sub and "$ref" not in sub:
                missing.append(f"{path}.{name}")
            missing += _described(sub, f"{path}.{name}")
        for key in ("$defs", "additionalProperties", "items"):
            if isinstance(node.get(key), dict):
                children = node[key].items() if key == "$defs" else [(key, node[key])]
                for name, sub in children:
                    missing += _described(sub, f"{path}.{name}")
    return missing


def test_every_property_has_a_description():
    assert _described(load_schema()) == []


def test_schema_defaults_match_the_dataclass_defaults():
    props = load_schema()["properties"]
    fmt = load_schema()["$defs"]["formatBody"]["properties"]
    kv = props["kv_cache"]["properties"]
    is_ = props["correction"]["properties"]["importance_sampling"]["properties"]
    numerics = props["numerics"]["properties"]
    assert kv["dtype"]["default"] == KVCacheSpec.dtype.value
    assert kv["scale"]["default"] == KVCacheSpec.scale.value
    assert kv["calibrate"]["default"] == KVCacheSpec.calibrate.value
    assert kv["calibration_sequences"]["default"] == KVCacheSpec.calibration_sequences
    assert is_["level"]["default"] == ImportanceSampling.level.value
    assert is_["mode"]["default"] == ImportanceSampling.mode.value
    assert is_["threshold"]["default"] == ImportanceSampling.threshold
    assert numerics["nonfinite"]["default"] == NumericsSpec.nonfinite.value
    assert numerics["batch_invariant"]["default"] == NumericsSpec.batch_invariant
    assert props["master_weights"]["default"] == Policy.__dataclass_fields__["master_weights"].default.value
    assert fmt["granularity"]["default"] == QuantFormat.granularity.value
    assert fmt["axis"]["default"] == QuantFormat.axis.value
    assert fmt["scale"]["default"] == QuantFormat.scale.value


def test_top_level_keys_are_required_only_without_extends():
    """`name` is not among them: the loader names a policy without one after its file, and the schema says so."""
    data, source_map, _ = parse_yaml("version: 1\n", "p.yaml")
    missing = sorted(d.message for d in check_structure(data, source_map))
    assert missing == ["missing required key 'phases'", "missing required key 'rules'"]
    data, source_map, _ = parse_yaml("extends: bf16_baseline\n", "p.yaml")
    assert check_structure(data, source_map) == []


def test_a_policy_without_a_name_is_named_after_its_file_by_the_loader_and_passes_the_schema(tmp_path):
    """An editor validating with schema.json and `precision validate` agree on a standalone policy without `name`."""
    text = "\n".join(line for line in (POLICIES / "bf16_baseline.yaml").read_text().splitlines()
                     if not line.startswith("name:"))
    data, _, _ = parse_yaml(text, "p.yaml")
    assert "name" not in data
    assert list(Draft202012Validator(load_schema()).iter_errors(data)) == []
    path = tmp_path / "my_baseline.yaml"
    path.write_text(text)
    assert check_policy(path).policy.name == "my_baseline"


def test_a_number_yaml_reads_as_text_gets_the_spelling_it_reads_as_a_number(tmp_path):
    """PyYAML (YAML 1.1) reads 2e0 and 1.5e3 as strings: "expected a number, got a string" alone puzzles."""
    path = tmp_path / "e.yaml"
    path.write_text("extends: fp8rl_rollout_tis\nname: e\ncorrection:\n  importance_sampling:\n    threshold: 2e0\n")
    (error,) = check_policy(path).errors
    assert error.hint == "YAML 1.1 reads 2e0 as text; write 2.0e+0"
    path.write_text(path.read_text().replace("2e0", "2.0e+0"))
    assert check_policy(path).policy.correction.importance_sampling.threshold == 2.0
