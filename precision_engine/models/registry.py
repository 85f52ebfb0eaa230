"""Built-in architectures: the public HF `config.json` of each model, written out so plans need no download.

Each entry keeps only the fields that shape the module tree (and the few a reader checks against the model
card); tokenizer ids and generation defaults are left out. The tiny models exist for tests and the CPU
backend: every GEMM dimension is a multiple of 128, so the 128x128 weight blocks and 1x128 groups of the
FP8 formats tile them exactly, like the real models.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class BuiltinModel:
    name: str
    hf_id: str | None  # where the config came from (None: a test model); also accepted as a spec, resolved offline
    config: Mapping


def _model(name: str, hf_id: str | None, config: dict) -> BuiltinModel:
    return BuiltinModel(name, hf_id, MappingProxyType(config))


_LLAMA_3_1_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}

_QWEN2_5_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_act": "silu",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 131072,
    "max_window_layers": 28,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
    "vocab_size": 152064,
}

_QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "attention_bias": False,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "max_position_embeddings": 40960,
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}

_QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "attention_bias": False,
    "decoder_sparse_step": 1,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "mlp_only_layers": [],
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}

# Tiny: hidden 256, 4 query heads and 2 KV heads of 64 (k/v_proj N = 128), intermediate 512, vocab 512.
_TINY_COMMON = {
    "attention_bias": False,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 256,
    "intermediate_size": 512,
    "max_position_embeddings": 2048,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,
    "vocab_size": 512,
}

_TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    **_TINY_COMMON,
    "mlp_bias": False,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
}

_TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    **_TINY_COMMON,
    "rope_theta": 1000000.0,
}

_TINY_QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    **_TINY_COMMON,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "moe_intermediate_size": 128,
    "norm_topk_prob": True,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "rope_theta": 1000000.0,
}

BUILTIN_MODELS: Mapping[str, BuiltinModel] = MappingProxyType(
    {
        model.name: model
        for model in (
            _model("tiny-llama", None, _TINY_LLAMA),
            _model("tiny-qwen3", None, _TINY_QWEN3),
            _model("tiny-qwen3-moe", None, _TINY_QWEN3_MOE),
            _model("llama-3.1-8b", "meta-llama/Llama-3.1-8B", _LLAMA_3_1_8B),
            _model("qwen2.5-7b", "Qwen/Qwen2.5-7B", _QWEN2_5_7B),
            _model("qwen3-8b", "Qwen/Qwen3-8B", _QWEN3_8B),
            _model("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", _QWEN3_30B_A3B),
        )
    }
)


def find_builtin(spec: str) -> BuiltinModel | None:
    """The built-in model a spec names: its short name or HF id, case-insensitively; None otherwise."""
    key = spec.strip().lower()
    for model in BUILTIN_MODELS.values():
        if key == model.name or (model.hf_id is not None and key == model.hf_id.lower()):
            return model
    return None
