"""What the rollout engine loads for a policy: block-FP8 weights from the trainer's master weights.

For every module the rollout plan runs in FP8, `weight` becomes float8_e4m3fn [N, K] plus `weight_scale_inv`
fp32 [ceil(N/128), ceil(K/128)] (a dequant multiplier despite its name), the layout of DeepSeek-V3 checkpoints
that SGLang's and vLLM's `Fp8Config` and transformers' `FineGrainedFP8Config` load. Everything else is written
in the module's planned compute dtype (bf16 by default). The FP8 bytes come from the same code the trainer's
forward uses (`Fp8Linear.quantized_weight()`, or the same `quantize_blocks` for a model not rewritten: for
128x128 e4m3 that is the exchange format's `to_block_fp8`), so rollout and training see the same bytes.

Fused MoE experts (transformers 5 keeps them as 3-D `gate_up_proj` / `down_proj`) are written per expert under
the names HF checkpoints use and SGLang loads, `mlp.experts.{e}.{gate,up,down}_proj.weight` (+ scale).

Three ways out: `quantization_config` (the dict), `iter_rollout_weights` (in-process weight sync, e.g. into
SGLang's `update_weights_from_tensor`), `export_checkpoint` (a safetensors directory, written atomically).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from precision_engine.errors import UnsupportedError, UsageError
from precision_engine.models.inventory import ModuleKind
from precision_engine.numerics.capabilities import WEIGHT_BLOCK
from precision_engine.numerics.formats import DType, Granularity, QuantFormat
from precision_engine.integrations.sglang_kv_scales import write_sglang_kv_scales
from precision_engine.numerics.kv_cache import KVScales
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.quantize import COMPUTE_TORCH_DTYPE, quantize_blocks
from precision_engine.rewrite.experts import EXPERT_PARAMS, Fp8Experts

ROLLOUT = "rollout"
KV_SCALES_FILE = "kv_cache_scales.json"  # pass to SGLang as --quantization-param-path
_SHARD_BYTES = 5 * 1024**3  # transformers' default max_shard_size


def quantization_config(plan, phase: str = ROLLOUT) -> dict:
    """`quantization_config` for config.json, read by SGLang/vLLM `Fp8Config` and transformers'
    `FineGrainedFP8Config`: the skip list goes under both `ignored_layers` (SGLang, vLLM) and
    `modules_to_not_convert` (transformers)."""
    phase_plan = _phase_plan(plan, phase)
    fp8 = [m for m in phase_plan.modules if m.is_fp8]
    _check_exportable(fp8)
    _check_fused_shards(phase_plan)
    gemm_kinds = (ModuleKind.LINEAR, ModuleKind.ROUTER, ModuleKind.EXPERTS)
    ignored = [m.module.name for m in phase_plan.modules if m.module.kind in gemm_kinds and not m.is_fp8]
    block = list(fp8[0].linear.weight.block) if fp8 else list(WEIGHT_BLOCK)
    return {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "weight_block_size": block,
        "ignored_layers": ignored,
        "modules_to_not_convert": list(ignored),
    }


def _phase_plan(plan, phase: str):
    if phase not in plan.phases:
        raise UsageError(f"unknown phase {phase!r}; the plan has {', '.join(plan.phases)}")
    return plan.phases[phase]


def _check_exportable(fp8_modules) -> None:
    """The exchange format is one block layout of e4m3, for linears and fused experts."""
    routers = [m.module.name for m in fp8_modules if m.module.kind is ModuleKind.ROUTER]
    if routers:
        raise UnsupportedError(f"block-FP8 export of MoE routers is not supported: {routers[:4]}")
    formats = {m.linear.weight for m in fp8_modules}
    if len(formats) > 1:
        raise UnsupportedError(f"an FP8 checkpoint has one weight format; the plan uses {len(formats)}")
    for fmt in formats:
        if fmt.granularity is not Granularity.BLOCK or fmt.dtype is not DType.FLOAT8_E4M3:
            raise UnsupportedError(
                f"rollout weights must be e4m3 blocks (SGLang's block-FP8 loader); the plan uses {fmt.describe()}"
            )
    for m in fp8_modules:
        if m.module.kind is ModuleKind.EXPERTS and (m.module.weight_shape[1] // 2) % m.linear.weight.block[0]:
            raise UnsupportedError(
                f"{m.module.name}: gate and up projections must each fill whole {m.linear.weight.block[0]}-row "
                "blocks to be written as separate checkpoint tensors"
            )


def iter_rollout_weights(model: nn.Module, plan, phase: str = ROLLOUT) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) in HF naming, as the rollout engine loads them; tensors stay on the model's device.

    A Parameter tied to one already yielded (tied embeddings) is skipped: loaders re-tie it from the config.
    """
    phase_plan = _phase_plan(plan, phase)
    fp8 = {m.module.name for m in phase_plan.modules if m.is_fp8}
    experts = {m.module.name for m in phase_plan.modules if m.module.kind is ModuleKind.EXPERTS}
    _check_exportable([phase_plan.by_name[name] for name in fp8])
    _check_fused_shards(phase_plan)
    _check_output_embedding(model, fp8)
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        module_name, _, param_name = name.rpartition(".")
        if module_name in experts and param_name in EXPERT_PARAMS:
            module = model.get_submodule(module_name)
            planned = phase_plan.by_name[module_name]
            yield from _per_expert(module, module_name, param_name, planned)
        elif module_name in fp8 and param_name == "weight":
            fmt = phase_plan.by_name[module_name].linear.weight
            weight_fp8, weight_scale_inv = _block_fp8(model.get_submodule(module_name), fmt)
            yield name, weight_fp8
            yield f"{module_name}.weight_scale_inv", weight_scale_inv
        elif tensor.is_floating_point():
            planned = phase_plan.by_name.get(module_name)
            dtype = COMPUTE_TORCH_DTYPE.get(planned.compute if planned else DType.BF16, torch.bfloat16)
            yield name, tensor.detach().to(dtype)
        else:
            yield name, tensor.detach()


# Projections SGLang and vLLM load as one fused layer (QKVParallelLinear, MergedColumnParallelLinear); their
# `is_layer_skipped` refuses a checkpoint in which only some shards of a fused layer are quantized.
_FUSED_SHARDS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def _check_fused_shards(phase_plan) -> None:
    for shards in _FUSED_SHARDS:
        groups: dict[str, dict[str, bool]] = {}
        for m in phase_plan.modules:
            parent, _, leaf = m.module.name.rpartition(".")
            if leaf in shards:
                groups.setdefault(parent, {})[leaf] = m.is_fp8
        for parent, fp8 in groups.items():
            if len(set(fp8.values())) > 1:
                quantized = ", ".join(leaf for leaf, is_fp8 in fp8.items() if is_fp8)
                raise UnsupportedError(
                    f"{parent}: only {quantized} of {'/'.join(shards)} in FP8; rollout engines fuse them into one "
                    "layer, quantized as a whole or not at all (hint: one rule for all of them)"
                )


def _check_output_embedding(model: nn.Module, fp8: set[str]) -> None:
    """SGLang's and vLLM's `Fp8Config` quantize LinearBase, MoE and attention layers only, and transformers puts
    the output embedding in `modules_to_not_convert`: an FP8 lm_head would load its raw FP8 values as BF16 (or,
    tied to embed_tokens, be skipped here and silently run in BF16)."""
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if get_head else None
    names = [name for name, module in model.named_modules() if module is head and name in fp8]
    if names:
        raise UnsupportedError(
            f"{names[0]} is the output embedding, which rollout engines load unquantized: it cannot be exported in "
            "FP8 (hint: keep it in bf16 with a `compute: bf16` rule)"
        )


def _per_expert(module: nn.Module, module_name: str, param_name: str, planned):
    """One fused 3-D Parameter -> HF per-expert tensors; gate_up_proj splits into gate_proj then up_proj."""
    weight = getattr(module, param_name)
    parts = ("gate_proj", "up_proj") if param_name == "gate_up_proj" else ("down_proj",)
    rows = weight.shape[1] // len(parts)
    dtype = COMPUTE_TORCH_DTYPE.get(planned.compute, torch.bfloat16)
    fp8 = planned.is_fp8
    for expert in range(weight.shape[0]):
        if fp8:
            if isinstance(module, Fp8Experts) and module.spec.weight == planned.linear.weight:  # the forward's bytes
                quantized = module.quantized_weight(param_name, expert)
            else:
                quantized = quantize_blocks(weight[expert].detach(), planned.linear.weight)
            data, scale = quantized.data, quantized.scale
            scale_rows = scale.shape[0] // len(parts)
        for i, part in enumerate(parts):
            prefix = f"{module_name}.{expert}.{part}"
            if fp8:
                yield f"{prefix}.weight", data[i * rows : (i + 1) * rows]
                yield f"{prefix}.weight_scale_inv", scale[i * scale_rows : (i + 1) * scale_rows]
            else:
                yield f"{prefix}.weight", weight[expert, i * rows : (i + 1) * rows].detach().to(dtype)


def _block_fp8(module: nn.Module, fmt: QuantFormat) -> tuple[torch.Tensor, torch.Tensor]:
    """Fp8Linear's cached Q(W) (the very bytes the trainer's forward multiplies with) when it runs the exported
    phase's format, else the same quantizer on the master weight (for 128x128 e4m3: exactly `to_block_fp8`)."""
    if isinstance(module, Fp8Linear) and module.spec.weight == fmt:
        quantized = module.quantized_weight()
    else:
        quantized = quantize_blocks(module.weight.detach(), fmt)
    return quantized.data, quantized.scale


def export_checkpoint(
    model: nn.Module,
    plan,
    out_dir: str | Path,
    *,
    phase: str = ROLLOUT,
    kv_scales: KVScales | None = None,
    overwrite: bool = False,
    max_shard_bytes: int = _SHARD_BYTES,
) -> Path:
    """Write safetensors + config.json (+ kv_cache_scales.json) for the rollout engine.

    Atomic: everything goes to a temporary sibling directory that is renamed into place at the end, so an
    error leaves no half-written checkpoint behind (and an existing one untouched unless `overwrite`).
    """
    out_dir = Path(out_dir).expanduser().resolve()
    if out_dir.exists() and not overwrite:
        raise UsageError(f"{out_dir} exists (hint: pass --overwrite or choose another --out)")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        _write_shards(iter_rollout_weights(model, plan, phase), staging, max_shard_bytes)
        config = _hf_config(model, quantization_config(plan, phase))
        (staging / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if kv_scales is not None:
            write_sglang_kv_scales(staging / KV_SCALES_FILE, kv_scales, config.get("model_type"))
        _grant_umask_permissions(staging)
        _replace_dir(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir


def _hf_config(model: nn.Module, quant_config: dict) -> dict:
    config = model.config.to_dict()
    config["architectures"] = config.get("architectures") or [type(model).__name__]
    config["dtype"] = "bfloat16"
    config.pop("torch_dtype", None)
    config["quantization_config"] = quant_config
    return config


def _write_shards(weights: Iterator[tuple[str, torch.Tensor]], directory: Path, max_shard_bytes: int) -> None:
    """model.safetensors, or model-0000i-of-0000n.safetensors + model.safetensors.index.json above the limit."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in weights:
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = _own_storage(tensor)
        size += nbytes
    if len(shards) == 1:
        save_file(shards[0], directory / "model.safetensors", metadata={"format": "pt"})
        return
    weight_map, total = {}, 0
    for i, shard in enumerate(shards, start=1):
        file_name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, directory / file_name, metadata={"format": "pt"})
        for name, tensor in shard.items():
            weight_map[name] = file_name
            total += tensor.numel() * tensor.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def _own_storage(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor that owns its storage: safetensors refuses views into shared memory
    (the per-expert slices of a fused weight)."""
    tensor = tensor.detach().contiguous().cpu()
    if tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size():
        tensor = tensor.clone()
    return tensor


def _grant_umask_permissions(directory: Path) -> None:
    """mkdtemp makes the staging directory private (0700); the checkpoint gets the modes a plain mkdir and
    open would give, so a rollout server running as another user can read it."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for path in directory.iterdir():
        path.chmod(0o666 & ~umask)


def _replace_dir(staging: Path, out_dir: Path) -> None:
    if not out_dir.exists():
        os.rename(staging, out_dir)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
    os.rename(out_dir, retired / out_dir.name)
    os.rename(staging, out_dir)
    shutil.rmtree(retired, ignore_errors=True)


def read_checkpoint(directory: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of an exported checkpoint, exactly as stored (CPU)."""
    directory = Path(directory)
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (directory / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise UsageError(f"{directory}: no model.safetensors or model.safetensors.index.json")
    tensors: dict[str, torch.Tensor] = {}
    for file_name in files:
        tensors.update(load_file(directory / file_name))
    return tensors
