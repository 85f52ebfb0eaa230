"""The receiving side of weight sync: load what `iter_rollout_weights` / `export_checkpoint` produce into a
rollout-phase model, so the rollout forward multiplies with the trainer's exact FP8 bytes.

Names follow the export: `<module>.weight` (float8_e4m3fn) + `<module>.weight_scale_inv` for FP8 linears,
plain tensors under their state_dict names for everything else. FP8 linears take the bytes through
`Fp8Linear.load_quantized` (never re-quantized); a name the model lacks, a tensor of the wrong shape, or an FP8
weight for a module the model does not run in FP8 is an error naming it, raised before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from precision_engine.errors import UnsupportedError, UsageError
from precision_engine.integrations.hf_export import read_checkpoint
from precision_engine.numerics.linear import Fp8Linear

SCALE_SUFFIX = ".weight_scale_inv"


def load_rollout_weights(model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """Load (name, tensor) pairs into `model` (already rewritten for rollout); returns the names loaded."""
    tensors = dict(weights)
    fp8_modules = {name.removesuffix(SCALE_SUFFIX) for name in tensors if name.endswith(SCALE_SUFFIX)}
    params = dict(model.named_parameters()) | dict(model.named_buffers())
    plain = {name: t for name, t in tensors.items()
             if name.removesuffix(SCALE_SUFFIX).removesuffix(".weight") not in fp8_modules}
    _check(model, tensors, fp8_modules, plain, params)
    with torch.no_grad():
        for name in sorted(fp8_modules):
            model.get_submodule(name).load_quantized(tensors[f"{name}.weight"], tensors[f"{name}{SCALE_SUFFIX}"])
        for name, tensor in plain.items():
            params[name].copy_(tensor)
    return sorted(tensors)


def load_checkpoint(model: nn.Module, directory: str | Path) -> list[str]:
    """`load_rollout_weights` from a directory written by `export_checkpoint`."""
    return load_rollout_weights(model, read_checkpoint(directory).items())


def _check(model: nn.Module, tensors: dict, fp8_modules: set[str], plain: dict, params: dict) -> None:
    """Every problem before any write: a half-loaded model would run with a mix of two weight versions."""
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
    for name, tensor in plain.items():
        if name not in params:
            problems.append(f"{name}: not a parameter or buffer of the model")
        elif tuple(params[name].shape) != tuple(tensor.shape):
            problems.append(f"{name}: shape {tuple(tensor.shape)}, the model's is {tuple(params[name].shape)}")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise UsageError(f"cannot load these weights: {shown}")


def _submodule(model: nn.Module, name: str) -> nn.Module | None:
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None
