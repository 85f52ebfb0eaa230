"""The validated, immutable policy object that the loader produces and the compiler consumes.

Everything here is plain frozen dataclasses and string enums; no torch, so the CLI stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from precision_engine.numerics.formats import DType, Kernel, LinearSpec, QuantFormat
# Defined in numerics (the kernels take them) and re-exported here, where the policy object uses them.
from precision_engine.numerics.specs import Calibrate, KVCacheSpec, KVScale, NonFinite, NumericsSpec

PHASES = ("train", "rollout")


@dataclass(frozen=True)
class SourceLocation:
    """Where a value came from, for error messages and plan provenance."""

    file: str
    line: int  # 1-based
    column: int  # 1-based

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Rule:
    """One rule: modules it matches and what it does to them.

    Patterns: an exact module name, a glob (`*`, `?`, `[...]`; `*` crosses dots), or `re:` + a regex that must
    match the whole name (`re.fullmatch`). `types` restricts to module class names (e.g. `Linear`). A rule sets
    either `linear` (quantized GEMM operands) or only `compute` (the module runs in that dtype).
    """

    match: tuple[str, ...]
    types: tuple[str, ...] = ()
    compute: DType = DType.BF16
    linear: LinearSpec | None = None
    label: str = ""  # "<ruleset>[<index>]", stable across extends, shown in plans
    location: SourceLocation | None = field(default=None, compare=False)


class ISLevel(str, Enum):
    TOKEN = "token"
    SEQUENCE = "sequence"


class ISMode(str, Enum):
    TRUNCATE = "truncate"  # TIS: weight = min(ratio, threshold)
    MASK = "mask"  # MIS: drop tokens/sequences whose ratio leaves [lower, threshold]


@dataclass(frozen=True)
class ImportanceSampling:
    level: ISLevel = ISLevel.TOKEN
    mode: ISMode = ISMode.TRUNCATE
    threshold: float = 2.0
    lower_threshold: float | None = None  # mask mode only; defaults to 1/threshold


@dataclass(frozen=True)
class CorrectionSpec:
    importance_sampling: ImportanceSampling | None = None  # None: off


@dataclass(frozen=True)
class Policy:
    name: str
    version: int
    formats: Mapping[str, QuantFormat]
    rule_sets: Mapping[str, tuple[Rule, ...]]
    phases: Mapping[str, str]  # phase name -> rule set name
    kv_cache: KVCacheSpec = KVCacheSpec()
    correction: CorrectionSpec = CorrectionSpec()
    master_weights: DType = DType.FP32
    kernel: Kernel = Kernel.AUTO
    numerics: NumericsSpec = NumericsSpec()
    description: str = ""
    source: Path | None = field(default=None, compare=False)
    # The fully merged document after `extends` and `--set`, as plain data: what `precision diff` compares.
    resolved: Mapping = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "formats", MappingProxyType(dict(self.formats)))
        object.__setattr__(self, "rule_sets", MappingProxyType(dict(self.rule_sets)))
        object.__setattr__(self, "phases", MappingProxyType(dict(self.phases)))

    def rules_for(self, phase: str) -> tuple[Rule, ...]:
        return self.rule_sets[self.phases[phase]]


__all__ = [
    "PHASES", "Calibrate", "CorrectionSpec", "ISLevel", "ISMode", "ImportanceSampling", "KVCacheSpec", "KVScale",
    "NonFinite", "NumericsSpec", "Policy", "Rule", "SourceLocation",
]
