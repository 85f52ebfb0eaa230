"""What the compiler needs to know about a model: every module that owns parameters, its kind and GEMM shapes.

The inventory is plain data (no torch objects), so a plan can be compiled, rendered and diffed without
keeping the model around. `inventory_from_model` walks an nn.Module (usually built on the meta device).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from precision_engine.errors import ModelError

if TYPE_CHECKING:
    from torch import nn


class ModuleKind(str, Enum):
    LINEAR = "linear"  # nn.Linear: one GEMM weight [N, K]
    EMBEDDING = "embedding"
    NORM = "norm"
    EXPERTS = "experts"  # fused MoE experts: 3-D weights [E, N, K], one GEMM per expert
    ROUTER = "router"  # MoE gate: a small GEMM kept in the compute dtype (FP8-RL keeps it BF16)
    OTHER = "other"

    @property
    def is_gemm(self) -> bool:
        """Kinds a `linear` rule can quantize."""
        return self in (ModuleKind.LINEAR, ModuleKind.EXPERTS)


@dataclass(frozen=True)
class ModuleInfo:
    """One module that owns parameters.

    `weight_shape` is the main weight as stored ([N, K] for a linear, [E, N, K] for fused experts).
    `params` lists every parameter the module owns directly, by name, with its shape: fused experts have two
    GEMM weights (gate_up_proj [E, 2I, H] and down_proj [E, H, I]) and both must tile into FP8 blocks.
    `flops_per_token` counts GEMM FLOPs of one token's forward pass (2*N*K per linear; top-k experts only);
    norms and embeddings count 0, and attention's score/value products are left out (they depend on the
    sequence length and are not module weights).
    """

    name: str
    type: str  # class name, e.g. "Linear", "Qwen3MoeExperts"
    kind: ModuleKind
    weight_shape: tuple[int, ...]
    flops_per_token: int
    params: tuple[tuple[str, tuple[int, ...]], ...] = ()
    experts_per_token: int = 0  # experts only: how many of the E experts each token visits

    @property
    def gemm_weights(self) -> tuple[tuple[str, tuple[int, int]], ...]:
        """(parameter name, (N, K)) of each GEMM weight, per expert for fused experts."""
        if self.kind is ModuleKind.LINEAR:
            return (("weight", (self.weight_shape[0], self.weight_shape[1])),)
        if self.kind is ModuleKind.EXPERTS:
            return tuple((name, (shape[1], shape[2])) for name, shape in self.params if len(shape) == 3)
        return ()

    @property
    def num_experts(self) -> int:
        return self.weight_shape[0] if self.kind is ModuleKind.EXPERTS else 0


@dataclass(frozen=True)
class ModelInventory:
    model_id: str  # the spec it was loaded from: a built-in name or a path
    architecture: str  # the model class, e.g. "LlamaForCausalLM"
    config: Mapping = field(repr=False)  # the config.json contents it was built from
    modules: tuple[ModuleInfo, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {m.name: m for m in self.modules})

    @property
    def by_name(self) -> Mapping[str, ModuleInfo]:
        return self._by_name

    def of_kind(self, *kinds: ModuleKind) -> tuple[ModuleInfo, ...]:
        return tuple(m for m in self.modules if m.kind in kinds)

    @property
    def gemm_flops_per_token(self) -> int:
        return sum(m.flops_per_token for m in self.modules if m.kind.is_gemm)


# The contract's name for the inventory type; both spellings refer to the same class.
ModuleInventory = ModelInventory


def _classify(name: str, module: nn.Module, params: Mapping[str, tuple[int, ...]]) -> ModuleKind:
    from torch import nn

    type_name = type(module).__name__
    if type_name.endswith("Router") or (isinstance(module, nn.Linear) and name.endswith("mlp.gate")):
        return ModuleKind.ROUTER
    if isinstance(module, nn.Linear):
        return ModuleKind.LINEAR
    if isinstance(module, nn.Embedding):
        return ModuleKind.EMBEDDING
    if type_name.endswith("Norm"):
        return ModuleKind.NORM
    if any(len(shape) == 3 for shape in params.values()):
        return ModuleKind.EXPERTS
    return ModuleKind.OTHER


def _flops_per_token(kind: ModuleKind, params: Mapping[str, tuple[int, ...]], experts_per_token: int) -> int:
    if kind in (ModuleKind.LINEAR, ModuleKind.ROUTER):
        n, k = params["weight"]
        return 2 * n * k
    if kind is ModuleKind.EXPERTS:
        per_expert = sum(shape[1] * shape[2] for shape in params.values() if len(shape) == 3)
        return 2 * per_expert * experts_per_token
    return 0


def inventory_from_model(model: nn.Module, *, model_id: str, config: Mapping) -> ModelInventory:
    """Walk `model.named_modules()` and describe every module that owns parameters directly."""
    experts_per_token = config.get("num_experts_per_tok") or 0
    if not isinstance(experts_per_token, int) or isinstance(experts_per_token, bool) or experts_per_token < 0:
        # config.json is user input, and architectures without experts pass this key through unchecked
        raise ModelError(f"{model_id}: num_experts_per_tok must be a non-negative integer, got {experts_per_token!r}")
    modules = []
    for name, module in model.named_modules():
        params = {p_name: tuple(p.shape) for p_name, p in module.named_parameters(recurse=False)}
        if not params:
            continue
        kind = _classify(name, module, params)
        main = "weight" if "weight" in params else next(iter(params))
        modules.append(
            ModuleInfo(
                name=name,
                type=type(module).__name__,
                kind=kind,
                weight_shape=params[main],
                flops_per_token=_flops_per_token(kind, params, experts_per_token),
                params=tuple(params.items()),
                experts_per_token=experts_per_token if kind is ModuleKind.EXPERTS else 0,
            )
        )
    return ModelInventory(model_id, type(model).__name__, dict(config), tuple(modules))
