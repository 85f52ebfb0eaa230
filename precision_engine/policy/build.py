"""Checked plain data -> the frozen Policy. Runs only after structure and meaning checks found no error,
so every lookup here is known to succeed; defaults come from the dataclasses in policy.model and
numerics.formats (tests pin them to the schema's `default`s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from precision_engine.numerics.formats import (Axis, DType, Granularity, Kernel, LinearSpec, QuantFormat,
                                               ScaleKind)
from precision_engine.policy.model import (Calibrate, CorrectionSpec, ImportanceSampling, ISLevel, ISMode,
                                           KVCacheSpec, KVScale, NonFinite, NumericsSpec, Policy, Rule,
                                           SourceLocation)
from precision_engine.policy.semantic import resolve_format
from precision_engine.policy.yaml_source import SourceMap


def build_format(data: dict) -> QuantFormat:
    block = data.get("block")
    return QuantFormat(
        dtype=DType(data["dtype"]),
        granularity=Granularity(data.get("granularity", Granularity.TENSOR.value)),
        group=int(data["group"]) if "group" in data else None,
        block=(int(block[0]), int(block[1])) if block else None,
        axis=Axis(data.get("axis", Axis.K.value)),
        scale=ScaleKind(data.get("scale", ScaleKind.FP32.value)),
    )


def _tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _location(source_map: SourceMap, path: tuple) -> SourceLocation | None:
    loc = source_map.locate(path)
    if loc is None or loc.line is None:
        return None
    return SourceLocation(loc.file, loc.line, loc.column)


def _build_rule(data: dict, rule: dict, label: str, default_kernel: Kernel, location) -> Rule:
    compute = DType(rule.get("compute", DType.BF16.value))
    linear = None
    if "linear" in rule:
        spec = rule["linear"]

        def operand(name: str) -> QuantFormat | None:
            ref = spec.get(name)
            return None if ref is None else build_format(resolve_format(ref, data))

        linear = LinearSpec(weight=operand("weight"), input=operand("input"), grad_output=operand("grad_output"),
                            wgrad_operands=operand("wgrad_operands"), wgrad_input=operand("wgrad_input"),
                            compute=compute,
                            kernel=Kernel(spec["kernel"]) if "kernel" in spec else default_kernel)
    return Rule(match=_tuple(rule.get("match")), types=_tuple(rule.get("types")), compute=compute, linear=linear,
                label=label, location=location)


def build_policy(data: dict, source_map: SourceMap, source: Path | None) -> Policy:
    kernel = Kernel(data.get("kernel", Kernel.AUTO.value))
    rule_sets = {
        name: tuple(_build_rule(data, rule, f"{name}[{i}]", kernel, _location(source_map, ("rules", name, i)))
                    for i, rule in enumerate(rules))
        for name, rules in data["rules"].items()
    }
    kv = data.get("kv_cache") or {}
    defaults_kv = KVCacheSpec()
    is_data = (data.get("correction") or {}).get("importance_sampling")
    importance = None
    if is_data is not None:
        importance = ImportanceSampling(
            level=ISLevel(is_data.get("level", ISLevel.TOKEN.value)),
            mode=ISMode(is_data.get("mode", ISMode.TRUNCATE.value)),
            threshold=float(is_data.get("threshold", ImportanceSampling.threshold)),
            lower_threshold=float(is_data["lower_threshold"]) if "lower_threshold" in is_data else None,
        )
    numerics = data.get("numerics") or {}
    return Policy(
        name=data["name"],
        version=data["version"],
        formats={name: build_format(fmt) for name, fmt in (data.get("formats") or {}).items()},
        rule_sets=rule_sets,
        phases=dict(data["phases"]),
        kv_cache=KVCacheSpec(
            dtype=DType(kv.get("dtype", defaults_kv.dtype.value)),
            scale=KVScale(kv.get("scale", defaults_kv.scale.value)),
            calibrate=Calibrate(kv.get("calibrate", defaults_kv.calibrate.value)),
            calibration_sequences=int(kv.get("calibration_sequences", defaults_kv.calibration_sequences)),
        ),
        correction=CorrectionSpec(importance_sampling=importance),
        master_weights=DType(data.get("master_weights", DType.FP32.value)),
        kernel=kernel,
        numerics=NumericsSpec(
            nonfinite=NonFinite(numerics.get("nonfinite", NonFinite.PROPAGATE.value)),
            batch_invariant=bool(numerics.get("batch_invariant", NumericsSpec.batch_invariant)),
        ),
        description=data.get("description", ""),
        source=source,
        resolved=data,
    )
