"""Adapters from the engine to the outside: HF/SGLang checkpoints and in-process weight sync."""

from precision_engine.integrations.hf_export import (
    export_checkpoint,
    iter_rollout_weights,
    quantization_config,
    read_checkpoint,
)

__all__ = ["export_checkpoint", "iter_rollout_weights", "quantization_config", "read_checkpoint"]
