"""The receiving side of weight sync: load what `iter_rollout_weights` / `export_checkpoint` produce into a
rollout-phase model, so the rollout forward multiplies with the trainer's exact FP8 bytes.

Names follow the export: `<module>.weight` (float8_e4m3fn) + `<module>.weight_scale_inv` (fp32) for FP8
linears, plain tensors under their state_dict names for everything else, and optional per-layer
`<attention>.k_scale` / `.v_scale` (the KV-cache scales rollout engines read; checked, not held by the model).
Fused MoE experts arrive per expert (`<experts>.{e}.{gate,up,down}_proj.weight`, HF's names) and are stacked back
into the model's 3-D `gate_up_proj` (gate rows, then up) and `down_proj`; pre-quantized experts are refused.
FP8 linears take the bytes through `Fp8Linear.load_quantized` (never re-quantized). A plain weight for an FP8
linear (a BF16 export) is its master weight: the module quantizes it by its own spec, as the trainer's does.

Weights are loaded exactly or refused, every problem named before anything is written (a half-loaded model
would run with two weight versions): each of the model's tensors exactly once (none missing, none unknown, a
tied alias not twice), the dtypes the export writes (no FP8 codes copied into a BF16 weight, no int or bf16
scales), the model's shapes, finite positive scales, no NaN FP8 byte, finite plain weights. `load_checkpoint`
first verifies the export manifest (sha256 of every file) and config.json's `quantization_config` and
architecture against the model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from precision_engine.errors import CheckpointError, UnsupportedError, UsageError
from precision_engine.integrations.export_files import read_checkpoint, read_json, verify_manifest
from precision_engine.numerics.contract import FP8_TORCH_DTYPE
from precision_engine.numerics.kv_cache import KV_SCALE_SUFFIXES
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.rewrite.experts import EXPERT_PARTS, Fp8Experts, is_fused_experts

SCALE_SUFFIX = ".weight_scale_inv"
_EXPERT_ROWS = tuple(part for parts in EXPERT_PARTS.values() for part in parts)  # gate_proj, up_proj, down_proj
_EXPERT_WEIGHT = re.compile(rf"(.+)\.(\d+)\.({'|'.join(_EXPERT_ROWS)})\.weight")  # HF's per-expert names
# config.json keys that describe the file, not the architecture; every other key must equal the model's.
_NOT_ARCHITECTURE = frozenset({"architectures", "dtype", "torch_dtype", "transformers_version", "_name_or_path",
                               "quantization_config"})


def load_rollout_weights(model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """Load (name, tensor) pairs into `model` (already rewritten for rollout); returns the names loaded."""
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in weights:
        if name in tensors:
            raise UsageError(f"cannot load these weights: {name} arrives twice")
        tensors[name] = tensor
    tensors = _stack_experts(model, tensors)
    fp8_modules = {name.removesuffix(SCALE_SUFFIX) for name in tensors if name.endswith(SCALE_SUFFIX)}
    params = _unique_tensors(model)
    kv = {name for name in tensors if name.endswith(KV_SCALE_SUFFIXES) and name not in params}
    plain = {name: t for name, t in tensors.items() if name not in kv
             and name.removesuffix(SCALE_SUFFIX).removesuffix(".weight") not in fp8_modules}
    _check(model, tensors, fp8_modules, plain, params, kv)
    with torch.no_grad():
        for name in sorted(fp8_modules):
            model.get_submodule(name).load_quantized(tensors[f"{name}.weight"], tensors[f"{name}{SCALE_SUFFIX}"])
        for name, tensor in plain.items():
            params[name].copy_(tensor)
    return sorted(tensors)


def load_checkpoint(model: nn.Module, directory: str | Path) -> list[str]:
    """`load_rollout_weights` from a directory written by `export_checkpoint`, after verifying its manifest
    and checking config.json against the model and the tensors."""
    directory = Path(directory)
    verify_manifest(directory)
    config = read_json(directory / "config.json", what="the model's config.json")
    tensors = read_checkpoint(directory)
    _check_config(model, config, tensors, directory / "config.json")
    try:
        return load_rollout_weights(model, tensors.items())
    except UsageError as err:
        raise CheckpointError(f"{directory}: {err}") from None


def _stack_experts(model: nn.Module, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`tensors` with each fused experts module's per-expert weights stacked into its two 3-D Parameters' names.
    A module whose set is incomplete is refused by name; one with FP8 scales is left to `_check` (unsupported)."""
    per_module: dict[str, dict[tuple[int, str], str]] = {}
    for name in tensors:
        match = _EXPERT_WEIGHT.fullmatch(name)
        if match and f"{match[1]}.{match[2]}.{match[3]}{SCALE_SUFFIX}" not in tensors:
            per_module.setdefault(match[1], {})[(int(match[2]), match[3])] = name
    stacked = dict(tensors)
    for module_name, parts in per_module.items():
        module = _submodule(model, module_name)
        if not (isinstance(module, Fp8Experts) or module is not None and is_fused_experts(module)):
            continue  # per-expert modules of the model's own (nn.Linear each): loaded by name as they are
        expected = [(e, part) for e in range(module.num_experts) for part in _EXPERT_ROWS]
        absent = [f"{module_name}.{e}.{part}.weight" for e, part in expected if (e, part) not in parts]
        if absent:
            raise UsageError(f"cannot load these weights: {module_name}: {len(absent)} expert weight(s) missing "
                             f"({', '.join(absent[:3])}{', ...' if len(absent) > 3 else ''})")
        take = {key: stacked.pop(name) for key, name in parts.items()}
        for param, rows in EXPERT_PARTS.items():  # the export's split, undone
            stacked[f"{module_name}.{param}"] = torch.stack(
                [torch.cat([take[(e, part)] for part in rows]) for e in range(module.num_experts)])
    return stacked


def _unique_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """state_dict names -> tensors, a tied Parameter under its first name only (as the export writes it)."""
    seen: set[int] = set()
    unique = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            unique[name] = tensor
    return unique


def _check(model, tensors: dict, fp8_modules: set[str], plain: dict, params: dict, kv: set[str]) -> None:
    """Every problem before any write."""
    meta = sorted(name for name, param in params.items() if param.is_meta)
    if meta:  # a copy into a meta tensor does nothing: the load would report success and hold no weight
        raise UsageError(f"cannot load weights into a model on the meta device ({meta[0]}, ...) (hint: "
                         "materialize it first: model.to_empty(device=...) or load it on a real device)")
    experts = sorted(name for name in fp8_modules if ".experts." in name)
    if experts:
        raise UnsupportedError(f"loading pre-quantized MoE experts is not supported yet ({experts[0]}, ...)")
    problems = []
    for name in sorted(fp8_modules):
        module = _submodule(model, name)
        if not isinstance(module, Fp8Linear):
            what = "no such module" if module is None else f"a {type(module).__name__}, not an FP8 linear"
            problems.append(f"{name}: FP8 weights for {what} (was the model rewritten for the rollout phase?)")
        elif f"{name}.weight" not in tensors:
            problems.append(f"{name}: weight_scale_inv without its weight")
        else:
            problems += _fp8_problems(name, module, tensors[f"{name}.weight"], tensors[f"{name}{SCALE_SUFFIX}"])
    for name, tensor in plain.items():
        problems += _plain_problems(model, name, tensor, params)
    problems += _kv_scale_problems(model, kv, tensors)
    covered = set(plain) | {f"{name}.weight" for name in fp8_modules}
    missing = [name for name in params if name not in covered]
    problems += [f"{name}: missing (the model's value would stay)" for name in missing]
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise UsageError(f"cannot load these weights: {shown}")


def _fp8_problems(name: str, module: Fp8Linear, weight: torch.Tensor, scale: torch.Tensor) -> list[str]:
    fmt = module.spec.weight
    expected_scale = tuple(-(-n // b) for n, b in zip(module.weight.shape, fmt.block))
    want = FP8_TORCH_DTYPE[fmt.dtype]
    if weight.dtype != want:
        return [f"{name}.weight: {weight.dtype}, the model runs it as {want}"]
    if scale.dtype != torch.float32:
        return [f"{name}{SCALE_SUFFIX}: {scale.dtype}, expected torch.float32"]
    if tuple(weight.shape) != tuple(module.weight.shape) or tuple(scale.shape) != expected_scale:
        return [f"{name}: weight {tuple(weight.shape)} with scales {tuple(scale.shape)}, the model's is "
                f"{tuple(module.weight.shape)} with scales {expected_scale}"]
    problems = []
    if not bool((torch.isfinite(scale) & (scale > 0)).all()):
        problems.append(f"{name}{SCALE_SUFFIX}: {_count_bad(scale)} scales are not finite and positive")
    nan_bytes = int(((weight.view(torch.uint8) & 0x7F) == 0x7F).sum()) if want == torch.float8_e4m3fn else 0
    if want == torch.float8_e5m2:
        nan_bytes = int((~torch.isfinite(weight.float())).sum())
    if nan_bytes:
        problems.append(f"{name}.weight: {nan_bytes} FP8 bytes are NaN")
    return problems


def _count_bad(scale: torch.Tensor) -> str:
    return f"{int((~(torch.isfinite(scale) & (scale > 0))).sum())} of {scale.numel()}"


def _plain_problems(model: nn.Module, name: str, tensor: torch.Tensor, params: dict) -> list[str]:
    if name not in params:
        aliases = dict(model.state_dict(keep_vars=True))
        if name in aliases:
            return [f"{name}: tied to another parameter, which the weights carry already"]
        return [f"{name}: not a parameter or buffer of the model"]
    param = params[name]
    if tuple(param.shape) != tuple(tensor.shape):
        return [f"{name}: shape {tuple(tensor.shape)}, the model's is {tuple(param.shape)}"]
    if tensor.dtype in FP8_TORCH_DTYPE.values():
        return [f"{name}: {tensor.dtype} without its weight_scale_inv (FP8 codes are not weights)"]
    if param.is_floating_point() != tensor.is_floating_point():
        return [f"{name}: {tensor.dtype}, the model's is {param.dtype}"]
    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        return [f"{name}: {int((~torch.isfinite(tensor)).sum())} elements are NaN/Inf"]
    return []


def _kv_scale_problems(model: nn.Module, kv: set[str], tensors: dict) -> list[str]:
    problems = []
    for name in sorted(kv):
        tensor = tensors[name]
        if not isinstance(_submodule(model, name.rpartition(".")[0]), nn.Module):
            problems.append(f"{name}: not a parameter or buffer of the model")
        elif tensor.dtype != torch.float32 or tensor.numel() != 1:
            problems.append(f"{name}: {tensor.dtype} {tuple(tensor.shape)}, expected one float32 scale")
        elif not (bool(torch.isfinite(tensor).all()) and float(tensor) > 0):
            problems.append(f"{name}: {float(tensor)} is not a finite positive scale")
    attention = {name.rpartition(".")[0] for name in kv}
    unpaired = sorted(f"{a}{s}" for a in attention for s in KV_SCALE_SUFFIXES if f"{a}{s}" not in tensors)
    problems += [f"{name}: missing (the other KV scale of its layer is given)" for name in unpaired]
    return problems


def _check_config(model: nn.Module, config, tensors: dict, path: Path) -> None:
    """config.json describes the model being loaded, and its `quantization_config` the tensors: the
    rollout engine that serves this directory reads config.json, not our tensors."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: not a config object")
    ours = json.loads(json.dumps(model.config.to_dict(), default=str))  # as config.json would hold it
    for key in sorted(config.keys() - _NOT_ARCHITECTURE):
        if key in ours and config[key] != ours[key]:
            raise CheckpointError(f"{path}: {key} is {config[key]!r}, the model's is {ours[key]!r}")
    fp8 = sorted(name.removesuffix(SCALE_SUFFIX) for name in tensors if name.endswith(SCALE_SUFFIX))
    quant = config.get("quantization_config")
    if not fp8:
        if quant is not None:
            raise CheckpointError(f"{path}: has a quantization_config but the weights hold no FP8 tensor")
        return
    if not isinstance(quant, dict) or quant.get("quant_method") != "fp8":
        raise CheckpointError(f"{path}: FP8 weights (e.g. {fp8[0]}) without quantization_config.quant_method fp8")
    ignored = set(quant.get("ignored_layers") or ())
    wrongly_ignored = sorted(ignored.intersection(fp8))
    if wrongly_ignored:
        raise CheckpointError(f"{path}: ignored_layers lists {wrongly_ignored[0]}, which the weights hold in FP8")
    bf16_linears = sorted(name for name, m in model.named_modules()
                          if isinstance(m, nn.Linear) and not isinstance(m, Fp8Linear) and name not in ignored)
    if bf16_linears:
        raise CheckpointError(f"{path}: ignored_layers omits {bf16_linears[0]}, which the model runs unquantized "
                              "(a rollout engine would read its weight as FP8)")
    for name in fp8:
        module = _submodule(model, name)
        block = list(module.spec.weight.block) if isinstance(module, Fp8Linear) else None
        if block is not None and quant.get("weight_block_size") != block:
            raise CheckpointError(f"{path}: weight_block_size {quant.get('weight_block_size')}, the model's "
                                  f"{name} uses {block}")


def _submodule(model: nn.Module, name: str) -> nn.Module | None:
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None
