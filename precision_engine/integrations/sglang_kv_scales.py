"""KV-cache scales in the two forms rollout engines read: checkpoint tensors and SGLang's JSON file.

- Checkpoint tensors `<layer>.self_attn.k_scale` / `.v_scale` (fp32 scalars): what SGLang's and vLLM's
  `Fp8KVCacheMethod` load into each attention layer and what their FA3 / flashinfer backends then use. Per-head
  scales reduce to the max over all KV heads (k and v kept apart).
- The `--quantization-param-path` JSON (vLLM's `QuantParamSchema`): SGLang wants exactly one entry per
  tensor-parallel rank (with another count it logs and uses 1.0), reads ONE scale per layer and rank and
  applies it to both k and v (as a float, which FA3 and flashinfer ignore). Per-head scales reduce to the max
  over that rank's KV heads and over k and v: safe (nothing saturates) but coarser than our own engine's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from precision_engine.errors import UsageError
from precision_engine.numerics.kv_cache import KV_SCALE_SUFFIXES, KVScales


def sglang_kv_scales(scales: KVScales, model_type: str | None, *, tp_size: int = 1) -> dict:
    """The JSON SGLang reads with `--quantization-param-path` (vLLM's `QuantParamSchema`):

    {"model_type": ..., "kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {tp_rank: {layer: scale}}}}
    One scale per layer and rank, applied to both k and v; per-head scales reduce to the max over the rank's
    KV heads (and over k and v).
    """
    if tp_size < 1:
        raise UsageError("tp_size must be >= 1")
    per_rank = [_rank_scales(scales, rank, tp_size) for rank in range(tp_size)]
    if any(not torch.isfinite(s).all() for s in per_rank):
        raise UsageError("KV scales contain NaN/Inf: calibration saw non-finite keys or values")
    return {
        "model_type": model_type,
        "kv_cache": {
            "dtype": "float8_e4m3fn",
            "scaling_factor": {
                str(rank): {str(layer): float(s[layer]) for layer in range(scales.num_layers)}
                for rank, s in enumerate(per_rank)
            },
        },
    }


def _rank_scales(scales: KVScales, rank: int, tp_size: int) -> torch.Tensor:
    k, v = scales.k.float().cpu(), scales.v.float().cpu()
    if not scales.per_head:
        return torch.maximum(k, v)
    heads = k.shape[1]
    if heads % tp_size == 0:  # heads split across ranks
        chosen = torch.arange(rank * heads // tp_size, (rank + 1) * heads // tp_size)
    elif tp_size % heads == 0:  # each KV head replicated on tp_size / heads ranks
        chosen = torch.tensor([rank // (tp_size // heads)])
    else:
        raise UsageError(f"tp_size {tp_size} neither divides nor is a multiple of the {heads} KV heads")
    return torch.maximum(k[:, chosen], v[:, chosen]).amax(dim=1)


def kv_scale_tensors(model, scales: KVScales):
    """(`<attention>.k_scale`, fp32 []) and `.v_scale` per layer, for the checkpoint; the attention modules
    are the model's `*.self_attn` in layer order."""
    attention = [name for name, _ in model.named_modules() if name.rpartition(".")[2] == "self_attn"]
    if len(attention) != scales.num_layers:
        raise UsageError(f"{scales.num_layers} layers of KV scales for a model with {len(attention)} attention "
                         "modules (`*.self_attn`)")
    k, v = scales.k.float().cpu(), scales.v.float().cpu()
    if scales.per_head:
        k, v = k.amax(dim=1), v.amax(dim=1)
    if not (torch.isfinite(k).all() and torch.isfinite(v).all()):
        raise UsageError("KV scales contain NaN/Inf: calibration saw non-finite keys or values")
    for layer, name in enumerate(attention):
        for suffix, scale in zip(KV_SCALE_SUFFIXES, (k, v)):
            yield f"{name}{suffix}", scale[layer].clone()


def write_sglang_kv_scales(path: str | Path, scales: KVScales, model_type: str | None, *, tp_size: int = 1) -> Path:
    path = Path(path)
    path.write_text(json.dumps(sglang_kv_scales(scales, model_type, tp_size=tp_size), indent=2) + "\n")
    return path


def read_sglang_kv_scales(path: str | Path, *, tp_rank: int = 0) -> KVScales:
    """Back from SGLang's JSON: the shared per-layer scale for one TP rank (k and v equal)."""
    document = json.loads(Path(path).read_text())
    try:
        layers = document["kv_cache"]["scaling_factor"][str(tp_rank)]
    except KeyError as err:
        raise UsageError(f"{path}: not an SGLang KV scale file for tp rank {tp_rank} (missing {err})") from None
    shared = torch.tensor([float(layers[str(i)]) for i in range(len(layers))], dtype=torch.float32)
    return KVScales(shared, shared.clone())
