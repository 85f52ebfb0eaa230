"""Adapters from the engine to the outside: HF/SGLang checkpoints and in-process weight sync, both ways."""

from precision_engine.integrations.hf_export import (
    export_checkpoint,
    iter_rollout_weights,
    quantization_config,
    read_checkpoint,
)
from precision_engine.integrations.weight_sync import load_checkpoint, load_rollout_weights

__all__ = [
    "export_checkpoint",
    "iter_rollout_weights",
    "load_checkpoint",
    "load_rollout_weights",
    "quantization_config",
    "read_checkpoint",
]
