"""FP8 forward for fused MoE experts (transformers 5 `Qwen3MoeExperts` and its kin), rollout only.

transformers 5 stores all experts of a layer as two 3-D Parameters, `gate_up_proj` [E, 2I, H] (gate rows
first) and `down_proj` [E, H, I], and loops over the experts a batch hits. `Fp8Experts` runs that same loop
with each expert's GEMMs in block-FP8 W8A8 through the engine's quantizers and `fp8_gemm`, so an expert's
output for a token does not depend on how many tokens the expert received (batch invariance, as for
`Fp8Linear`). Each expert's weight is quantized in 128x128 blocks once per weight version, the bytes
`hf_export` writes for it.

Forward only: FP8-RL quantizes experts for rollout and trains them in BF16. Training experts in FP8 (Jet-RL's
three FP8 GEMMs per expert) needs a grouped backward this engine does not have yet, so `apply` refuses the
train phase and the forward refuses to record autograd.
"""

from __future__ import annotations

import torch
from torch import nn

from precision_engine.errors import UnsupportedError
from precision_engine.numerics.capabilities import linear_problems
from precision_engine.numerics.formats import LinearSpec
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.linear import weight_cache_key
from precision_engine.numerics.contract import COMPUTE_TORCH_DTYPE, Quantized
from precision_engine.numerics.quantize import check_finite, quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.specs import NumericsSpec

# Each fused 3-D Parameter, and its rows as HF checkpoints name them per expert (`experts.{e}.gate_proj.weight`).
EXPERT_PARTS = {"gate_up_proj": ("gate_proj", "up_proj"), "down_proj": ("down_proj",)}
EXPERT_PARAMS = tuple(EXPERT_PARTS)


def is_fused_experts(module: nn.Module) -> bool:
    """The transformers 5 layout this module runs: 3-D gate_up_proj and down_proj, an act_fn, num_experts."""
    params = [getattr(module, name, None) for name in EXPERT_PARAMS]
    return (
        all(isinstance(p, nn.Parameter) and p.dim() == 3 for p in params)
        and hasattr(module, "act_fn")
        and hasattr(module, "num_experts")
    )


class Fp8Experts(nn.Module):
    """Shares `gate_up_proj` / `down_proj` with the experts module it wraps (same state_dict keys)."""

    def __init__(self, experts: nn.Module, spec: LinearSpec, *, numerics: NumericsSpec | None = None):
        super().__init__()
        if not is_fused_experts(experts):
            raise UnsupportedError(f"{type(experts).__name__} is not a fused-experts module with 3-D weights")
        problems = linear_problems(spec, backward=False, experts=True)
        if problems:
            raise UnsupportedError(f"Fp8Experts cannot run this spec: {problems[0].message}")
        self.spec = spec
        self.numerics = numerics or NumericsSpec()
        self.num_experts = experts.num_experts
        self.act_fn = experts.act_fn
        self.gate_up_proj = experts.gate_up_proj
        self.down_proj = experts.down_proj
        object.__setattr__(self, "_original", experts)  # not a submodule: its Parameters are ours already
        self._w_cache: dict[str, tuple[tuple, dict[int, Quantized]]] = {}  # per Parameter: version, experts

    def to_experts(self) -> nn.Module:
        """The original module, holding this module's current Parameters (they may have been replaced since the
        rewrite: a meta model materialized, `load_state_dict(assign=True)`)."""
        for name in EXPERT_PARAMS:
            setattr(self._original, name, getattr(self, name))
        return self._original

    def invalidate_weight_cache(self) -> None:
        """Forget every Q(W_e): call after an optimizer step that wrote the experts (see numerics.linear)."""
        self._w_cache = {}

    def quantized_weight(self, param_name: str, expert: int) -> Quantized:
        """Q(W_e) in 128x128 blocks, cached until invalidated or the Parameter visibly changes."""
        weight = getattr(self, param_name)
        version = weight_cache_key(weight)
        cached_version, per_expert = self._w_cache.get(param_name, (None, {}))
        if cached_version != version:
            per_expert = {}
            self._w_cache[param_name] = (version, per_expert)
        if expert not in per_expert:
            quantized = quantize_blocks(weight[expert].detach(), self.spec.weight)
            check_finite(quantized, self.numerics.nonfinite, f"{param_name}[{expert}]")
            per_expert[expert] = quantized
        return per_expert[expert]

    def _linear(self, x: torch.Tensor, param_name: str, expert: int) -> torch.Tensor:
        xq = quantize_rows_1xG(x, self.spec.input)
        check_finite(xq, self.numerics.nonfinite, "input")
        return fp8_gemm(
            xq,
            self.quantized_weight(param_name, expert),
            out_dtype=COMPUTE_TORCH_DTYPE[self.spec.compute],
            kernel=self.spec.kernel,
            batch_invariant=self.numerics.batch_invariant,
        )

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
        if torch.is_grad_enabled() and (hidden_states.requires_grad or self.gate_up_proj.requires_grad):
            raise UnsupportedError(
                "FP8 MoE experts run forward only (rollout); run under torch.no_grad() or keep experts in bf16 "
                "for training"
            )
        final_hidden_states = torch.zeros_like(hidden_states)
        hit = torch.unique(top_k_index[top_k_index < self.num_experts])
        for expert in hit.tolist():
            token_idx, top_k_pos = torch.where(top_k_index == expert)
            gate, up = self._linear(hidden_states[token_idx], "gate_up_proj", expert).chunk(2, dim=-1)
            out = self._linear(self.act_fn(gate) * up, "down_proj", expert)
            out = out * top_k_weights[token_idx, top_k_pos, None]
            final_hidden_states.index_add_(0, token_idx, out.to(final_hidden_states.dtype))
        return final_hidden_states

    def extra_repr(self) -> str:
        return f"num_experts={self.num_experts}, w={self.spec.weight.describe()}, x={self.spec.input.describe()}"
