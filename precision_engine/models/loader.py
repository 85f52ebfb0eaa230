"""Resolve a model spec to a config and build the HF model from it, never touching the network.

A spec is a built-in name (or that model's HF id), a local HF model directory, or a config.json path.
Hub ids are never fetched: plans must work offline and reproducibly, so an unknown id is an error that
says how to get its config.json instead.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from precision_engine.errors import ModelError
from precision_engine.models.inventory import ModelInventory, inventory_from_model
from precision_engine.models.registry import BUILTIN_MODELS, find_builtin
from precision_engine.policy.diagnostics import did_you_mean

if TYPE_CHECKING:
    import torch
    from torch import nn

# config.json keys that describe a checkpoint's stored weights, not the architecture: building from them
# would make transformers wrap modules in quantized layers (and want their kernels installed).
_CHECKPOINT_ONLY_KEYS = ("quantization_config",)


def text_config(config: dict) -> dict:
    """The decoder's part of a config.json: `text_config` for a multimodal model's (Qwen3-VL, Llama 4), the
    config itself otherwise."""
    return config.get("text_config") or config


def max_positions(config: dict) -> int | None:
    """config.json's max_position_embeddings (the decoder part's, else the top level's), None where it has none:
    past it RoPE extrapolates."""
    limit = text_config(config).get("max_position_embeddings") or config.get("max_position_embeddings")
    return limit if isinstance(limit, int) else None


def resolve_config(spec: str) -> dict:
    """The config.json contents a spec names, as a dict."""
    builtin = find_builtin(spec)
    if builtin is not None:
        return json.loads(json.dumps(dict(builtin.config)))  # a deep, mutable copy
    if not spec.strip():  # Path("") is the working directory, and the message would be about it
        raise ModelError(_unknown_spec_message(spec))
    path = Path(spec).expanduser()
    try:
        if path.is_dir():
            path = path / "config.json"
            if not path.is_file():
                raise ModelError(f"{spec}: a directory without a config.json; pass an HF model directory")
        if path.exists() and not path.is_file():  # a device or FIFO: reading it could block or never end
            raise ModelError(f"{spec}: not a regular file; pass an HF model directory or its config.json")
        if not path.is_file():
            raise ModelError(_unknown_spec_message(spec))
    except OSError as err:  # ENAMETOOLONG (a name over 255 bytes), EACCES, ELOOP
        raise ModelError(f"cannot open model {spec[:200]!r}: {err.strerror or err}") from None
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelError(f"{path}: not a readable config.json ({err})") from None
    except RecursionError:  # json recurses per level: `[[[[...` deeper than the interpreter's stack limit
        raise ModelError(f"{path}: not an HF config.json (JSON nested too deeply)") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ModelError(f"{path}: not an HF config.json (no 'model_type' key)")
    for part in (config, config.get("text_config")):
        for key in _SIZES:
            value = part.get(key) if isinstance(part, dict) else None
            if isinstance(value, int) and not isinstance(value, bool) and value < 1:
                raise ModelError(f"{path}: {key} is {value}; an architecture's sizes are >= 1")
    return config


# Architecture sizes a config.json may hold: transformers builds zero-element or layerless models from a 0 or a
# negative one without a word, and a plan over them would say nothing true.
_SIZES = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "head_dim", "vocab_size")


@contextmanager
def config_spec(config: dict) -> Iterator[str]:
    """A spec for `config` (e.g. a built-in model cut to fewer layers): a config.json in a temporary directory,
    removed on exit, since plans are compiled from specs."""
    with tempfile.TemporaryDirectory(prefix="precision-config.") as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(config))
        yield str(path)


def _unknown_spec_message(spec: str) -> str:
    names = list(BUILTIN_MODELS)
    close = did_you_mean(spec.lower(), names)
    hint = f" {close}" if close else ""
    return (
        f"unknown model '{spec}': not a built-in architecture and no such file or directory.{hint} "
        f"Built-in: {', '.join(names)}. For another model pass a local HF model directory or its config.json "
        f"(hub ids are never downloaded)."
    )


def _hf_config(config: dict, spec: str):
    from transformers import CONFIG_MAPPING, AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    kwargs = {k: v for k, v in config.items() if k not in _CHECKPOINT_ONLY_KEYS}
    model_type = kwargs.pop("model_type")
    if model_type not in CONFIG_MAPPING:
        close = did_you_mean(model_type, CONFIG_MAPPING.keys())
        hint = f"; {close}" if close else " (a newer transformers may know it)"
        raise ModelError(f"{spec}: transformers does not know model_type '{model_type}'{hint}")
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ModelError(f"{spec}: model_type '{model_type}' is not a causal language model")
    try:
        return AutoConfig.for_model(model_type, **kwargs)
    except Exception as err:  # noqa: BLE001 (config.json is user input: any rejection is a user error)
        raise ModelError(f"{spec}: transformers rejects this {model_type} config: {_one_line(err)}") from None


def _one_line(err: Exception, limit: int = 300) -> str:
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _torch_dtype(dtype: torch.dtype | str) -> torch.dtype:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    aliases = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
    resolved = getattr(torch, aliases.get(dtype, dtype), None)
    if not isinstance(resolved, torch.dtype) or not resolved.is_floating_point:
        raise ModelError(f"unknown dtype '{dtype}'; use bf16, fp16 or fp32")
    return resolved


def build_model(
    spec: str, *, device: torch.device | str = "meta", dtype: torch.dtype | str = "fp32", seed: int = 0
) -> nn.Module:
    """The HF causal LM a spec names, with random weights (none at all on the meta device).

    `seed` makes CPU/GPU initialisation reproducible without disturbing the caller's RNG state.
    """
    return _build(resolve_config(spec), spec, device=device, dtype=dtype, seed=seed)


def _build(config: dict, spec: str, *, device: torch.device | str, dtype: torch.dtype | str, seed: int) -> nn.Module:
    import torch
    from transformers import AutoModelForCausalLM

    hf_config = _hf_config(config, spec)
    torch_dtype = _torch_dtype(dtype)
    target = torch.device(device)
    cuda_devices = []  # fork_rng restores the CPU generator always, a GPU's only when named
    if target.type == "cuda":
        cuda_devices = [target.index if target.index is not None else torch.cuda.current_device()]
    with torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(seed)
        try:
            with target:
                model = AutoModelForCausalLM.from_config(hf_config, dtype=torch_dtype)
        except Exception as err:  # noqa: BLE001 (sizes that pass the config's checks but not the modules')
            raise ModelError(f"{spec}: transformers cannot build this model: {_one_line(err)}") from None
    return model.eval()


# Weight files `load_model` reads: safetensors, or PyTorch pickles loaded with torch.load(weights_only=True),
# which unpickles tensors and plain containers only (never code).
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


def has_checkpoint_weights(spec: str) -> bool:
    """Whether `spec` is a local HF model directory with weights (safetensors or pytorch_model*.bin)."""
    if find_builtin(spec) is not None:
        return False
    directory = Path(spec).expanduser()
    try:
        return directory.is_dir() and any(any(directory.glob(p)) for p in WEIGHT_PATTERNS)
    except OSError:
        return False


def load_model(
    spec: str,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | str = "bf16",
    seed: int = 0,
    random_weights: bool = False,
) -> nn.Module:
    """The model `check` and `export` run, offline, in eval mode, on `device`: a built-in architecture with
    random weights from `seed`, or a local HF directory's own weights. A directory (or config.json) without
    weights is refused unless `random_weights` asks for random ones explicitly: exporting or checking random
    weights by accident would look like success."""
    if random_weights or find_builtin(spec) is not None:
        return build_model(spec, device=device, dtype=dtype, seed=seed)
    resolve_config(spec)  # the same checks and messages as for a config-only spec
    if not has_checkpoint_weights(spec):
        raise ModelError(f"{spec}: no weights ({' or '.join(WEIGHT_PATTERNS)}) (hint: pass --random-weights to "
                         "run this architecture with random weights)")
    from transformers import AutoModelForCausalLM

    try:
        # ignore_mismatched_sizes: transformers then reports a wrong shape by name instead of raising "look at the
        # above report"; `_check_loading_info` refuses it either way.
        model, info = AutoModelForCausalLM.from_pretrained(Path(spec).expanduser(), dtype=_torch_dtype(dtype),
                                                           local_files_only=True, weights_only=True,
                                                           output_loading_info=True, ignore_mismatched_sizes=True)
    except Exception as err:  # noqa: BLE001 (a damaged or foreign checkpoint is user input)
        raise ModelError(f"{spec}: cannot load its weights: {_one_line(err)}") from None
    _check_loading_info(spec, info)
    return model.to(device).eval()


def _check_loading_info(spec: str, info: dict) -> None:
    """Refuse weights transformers would fill with random values (missing, wrong shape) or drop (unexpected:
    e.g. an FP8 export's `weight_scale_inv` when its config.json lost the quantization_config): a damaged
    checkpoint would otherwise check and export as random weights. Tied weights are not reported missing, nor the
    KV-cache scales an FP8-KV export carries for rollout engines (no weight of the model)."""
    from precision_engine.numerics.kv_cache import KV_SCALE_SUFFIXES

    problems = {
        "missing": sorted(info.get("missing_keys") or ()),
        "unexpected": sorted(k for k in info.get("unexpected_keys") or () if not k.endswith(KV_SCALE_SUFFIXES)),
        "of the wrong shape": sorted(
            f"{name} ({list(stored)} stored, {list(expected)} expected)"
            for name, stored, expected in info.get("mismatched_keys") or ()
        ),
    }
    found = [f"{len(names)} {what}: {_first_few(names)}" for what, names in problems.items() if names]
    if found:
        raise ModelError(f"{spec}: its weights do not match its config.json ({'; '.join(found)})"
                         " (hint: a damaged or incomplete checkpoint, or a config.json from another model)")


def _first_few(names: list[str], count: int = 3) -> str:
    more = f", ... ({len(names) - count} more)" if len(names) > count else ""
    return ", ".join(names[:count]) + more


def estimated_bytes(spec: str, *, dtype: torch.dtype | str = "bf16") -> int:
    """Bytes of the weights `load_model(spec)` would hold, counted on the meta device (nothing allocated)."""
    import torch

    model = _build(resolve_config(spec), spec, device="meta", dtype=dtype, seed=0)
    element = torch.empty((), dtype=_torch_dtype(dtype)).element_size()
    seen = {id(p): p.numel() for p in model.parameters()}
    return sum(seen.values()) * element


def load_inventory(spec: str) -> ModelInventory:
    """The module inventory of a model, built on the meta device: no weights are allocated or downloaded."""
    config = resolve_config(spec)
    model = _build(config, spec, device="meta", dtype="bf16", seed=0)
    builtin = find_builtin(spec)
    return inventory_from_model(model, model_id=builtin.name if builtin else spec, config=config)
