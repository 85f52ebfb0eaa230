"""Structural checks against schema.json, turned into located diagnostics a person can act on.

schema.json is the single source of truth for structure (keys, types, enums, defaults); this module only
translates jsonschema's errors: unknown keys point at the key with a "did you mean" hint, enums list the
valid values, missing keys name themselves.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from typing import Any

from precision_engine.policy.diagnostics import Diagnostic, did_you_mean, shown
from precision_engine.policy.yaml_source import SourceMap

_JSON_TYPES = {dict: "mapping", list: "list", str: "string", bool: "boolean", int: "integer", float: "number",
               type(None): "null"}
# The schema's name patterns in words: `1w` holds only valid characters, but may not start with a digit.
_NAME_RULES = {"^[A-Za-z0-9][A-Za-z0-9_.-]*$": "letters, digits, _ . -, starting with a letter or digit",
               "^[A-Za-z_][A-Za-z0-9_.-]*$": "letters, digits, _ . -, starting with a letter or _"}
_FORMAT_HINT = "a format is a mapping (dtype, granularity, ...); a rule can name a preset such as " \
    "fp8_block_weight directly"
_TYPE_WORDS = {"object": "mapping", "array": "list", "string": "string", "integer": "integer",
               "number": "number", "boolean": "boolean", "null": "null"}


def schema_text() -> str:
    return resources.files("precision_engine.policy").joinpath("schema.json").read_text()


@lru_cache(maxsize=1)
def load_schema() -> dict:
    return json.loads(schema_text())


@lru_cache(maxsize=1)
def _validator():
    from jsonschema import Draft202012Validator  # noqa: PLC0415 (only when a policy is checked)

    return Draft202012Validator(load_schema())


def check_structure(data: Any, source_map: SourceMap, *, complete: bool = True) -> list[Diagnostic]:
    """Every schema violation in `data`, located through `source_map`.

    `complete=False` (a base in `extends` failed to load) skips missing-key errors: the base may hold them.
    """
    diagnostics: list[Diagnostic] = []
    for error in _validator().iter_errors(data):
        if complete or error.validator != "required":
            diagnostics.extend(_translate(error, source_map))
    return list(dict.fromkeys(diagnostics))  # jsonschema reports `required` once per missing key, with all keys


def _type_name(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


# 2e0, 1.5e3: numbers to JSON and to people, text to YAML 1.1 (its floats need a point and a signed exponent)
_YAML11_NOT_A_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _yaml11_float(text: str) -> str:
    """'2e0' -> '2.0e+0': the spelling YAML 1.1 reads as the same float."""
    mantissa, exponent = text.lower().split("e")
    if "." not in mantissa:
        mantissa += ".0"
    if mantissa.lstrip("+-").startswith("."):
        mantissa = mantissa.replace(".", "0.", 1)
    return f"{mantissa}e{exponent if exponent[0] in '+-' else '+' + exponent}"


def _a(word: str) -> str:
    """'integer' -> 'an integer', 'null' -> 'null': type names as they read in a sentence."""
    if word == "null":
        return word
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def _translate(error, source_map: SourceMap) -> list[Diagnostic]:
    path = tuple(error.absolute_path)
    kind, expected, value = error.validator, error.validator_value, error.instance
    if kind == "additionalProperties" and isinstance(value, dict):
        known = list(error.schema.get("properties", {}))
        return [source_map.diagnostic(path + (key,), f"unknown key {shown(key)}; expected one of: "
                                      f"{', '.join(known)}", hint=did_you_mean(key, known), key=True)
                for key in value if key not in known]
    if kind == "required" and isinstance(value, dict):
        # located where the key went missing: a `--set key=null` that removed it, else the mapping that lacks it
        return [source_map.diagnostic(path, f"missing required key '{key}'", at=path + (key,)) for key in expected
                if key not in value]
    if kind == "enum":
        choices = [str(c) for c in expected]
        return [source_map.diagnostic(path, f"unknown value {shown(value)}; expected one of: {', '.join(choices)}",
                                      hint=did_you_mean(value, choices))]
    if kind == "const":
        return [source_map.diagnostic(path, f"expected {expected!r}, got {shown(value)}")]
    if kind == "type":
        wanted = [expected] if isinstance(expected, str) else list(expected)
        words = " or ".join(_a(_TYPE_WORDS.get(w, w)) for w in wanted)
        hint = _FORMAT_HINT if len(path) == 2 and path[0] == "formats" else ""
        if "number" in wanted and isinstance(value, str) and _YAML11_NOT_A_FLOAT.fullmatch(value):
            hint = f"YAML 1.1 reads {value} as text; write {_yaml11_float(value)}"
        return [source_map.diagnostic(path, f"expected {words}, got {_a(_type_name(value))} ({shown(value)})",
                                      hint=hint)]
    if kind in ("minItems", "minLength") and expected == 1:
        return [source_map.diagnostic(path, "must not be empty")]
    if kind == "minItems":
        return [source_map.diagnostic(path, f"expected at least {expected} items, got {len(value)}")]
    if kind == "maxItems":
        return [source_map.diagnostic(path, f"expected at most {expected} items, got {len(value)}")]
    if kind in ("minimum", "exclusiveMinimum"):
        op = ">=" if kind == "minimum" else ">"
        return [source_map.diagnostic(path, f"expected a value {op} {expected}, got {shown(value)}")]
    if kind == "pattern":
        message = f"{shown(value)} is not a valid name ({_NAME_RULES.get(expected, expected)})"
        if "propertyNames" in error.schema_path:  # jsonschema reports the object's path: point at the key
            return [source_map.diagnostic(path + (value,), message, key=True)]
        return [source_map.diagnostic(path, message)]
    return [source_map.diagnostic(path, error.message)]  # rare kinds; Diagnostic clips the quoted value
