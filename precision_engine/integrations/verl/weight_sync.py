"""The tensors verl's weight sync hands SGLang, as our trainer's forward computes with them.

verl's FSDP engine streams `(HF name, full master tensor)` pairs (`get_per_tensor_param`: FP32 masters by
default, fused MoE experts already split per expert). For every module the rollout plan runs in FP8 this
replaces `<module>.weight` by `weight` float8_e4m3fn [N, K] + `weight_scale_inv` fp32 [ceil(N/128),
ceil(K/128)], SGLang's block-FP8 checkpoint layout, which its `load_weights` fuses into q/k/v and gate/up
itself (each shard is a whole number of 128-row blocks, checked by `quantization_config`). Everything else
goes out in the FSDP parameter dtype.

The bytes are exactly the trainer's: FSDP's mixed precision casts each master element to `param_dtype` before
the forward, and `Fp8Linear.quantized_weight()` quantizes that with `quantize_blocks`; here the same cast and
the same `quantize_blocks` run on the same master values. Modules the training phase keeps in BF16
(FP8-RL's rollout-only FP8) get the very quantizer our rollout rewrite uses, so the bytes equal our own rollout
engine's. verl's `rollout.quantization=fp8` path instead re-quantizes with its own reciprocal-multiply kernel.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import torch

from precision_engine.errors import ModelError
from precision_engine.numerics.quantize import quantize_blocks

ROLLOUT = "rollout"
SCALE_SUFFIX = ".weight_scale_inv"
# verl's `unfuse_moe_params` writes fused 3-D experts per expert under HF checkpoint names.
_EXPERT_WEIGHT = re.compile(r"^(?P<module>.+\.experts)\.\d+\.(?:gate|up|down)_proj\.weight$")


def fp8_weight_formats(plan) -> dict[str, object]:
    """Module name -> weight QuantFormat for every module the rollout phase runs in FP8."""
    return {m.module.name: m.linear.weight for m in plan.phases[ROLLOUT].modules if m.is_fp8}


def rollout_tensors(
    params: Iterable[tuple[str, torch.Tensor]], plan, *, param_dtype: torch.dtype = torch.bfloat16
) -> Iterator[tuple[str, torch.Tensor]]:
    """verl's `(name, tensor)` stream -> the stream SGLang loads for `plan`'s rollout phase.

    Raises ModelError at the end of the stream if an FP8 module never came by: SGLang would keep serving the
    weights it had for it (random ones at the first sync), which no later check would notice.
    """
    formats = fp8_weight_formats(plan)
    missing = set(formats)
    for name, tensor in params:
        module = _fp8_module(name, formats)
        if module is None:
            yield name, tensor.detach().to(param_dtype) if tensor.is_floating_point() else tensor.detach()
            continue
        missing.discard(module)
        quantized = quantize_blocks(tensor.detach().to(param_dtype), formats[module])
        base = name.removesuffix(".weight")
        yield name, quantized.data
        yield base + SCALE_SUFFIX, quantized.scale
    if missing:
        first = sorted(missing)[0]
        raise ModelError(f"weight sync sent no weight for {len(missing)} module(s) the rollout runs in FP8 "
                         f"({first}, ...): the trainer's parameter names do not match the plan's")


def _fp8_module(name: str, formats: dict) -> str | None:
    if not name.endswith(".weight"):
        return None
    module = name.removesuffix(".weight")
    if module in formats:
        return module
    match = _EXPERT_WEIGHT.match(name)
    return match["module"] if match and match["module"] in formats else None
