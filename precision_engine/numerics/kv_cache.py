"""FP8 KV cache in SGLang's `--kv-cache-dtype fp8_e4m3` format, with calibrated per-layer scales.

What SGLang does, and so what this cache does:
- keys and values are stored as float8_e4m3fn, quantized on write with a static per-layer scale (the DEQUANT
  multiplier, x ~= q * scale), dequantized on read; without a scale file every scale is 1.0;
- the scale file (`--quantization-param-path`) carries ONE scale per layer and tensor-parallel rank, used for
  both k and v (`attn.k_scale = attn.v_scale = scaling_factor`).
So `per_tensor` here means one scale per layer shared by k and v (max of both amaxes / 448): the rollout cache
quantizes exactly as SGLang does with the exported file. `per_head` keeps separate k and v scales per KV head
(finer, our own rollout engine only); its JSON export is reduced to one scale per layer and TP rank, the max
over that rank's heads, which is safe (nothing saturates) but coarser.

Quantization is the numerics contract's own (`quantize.scale_from_amax`, `quantize.cast_to_fp8`):
q = saturate(x_fp32 / scale) cast with round-to-nearest-even; scale = max(amax, AMAX_EPS) / 448, NaN when
amax is not finite. Unlike SGLang (which divides in bf16 and casts without clamping) values
beyond the calibrated range saturate instead of overflowing to NaN.

The cache layer keeps the FP8 tensors in `keys` / `values`, so transformers' own cropping, beam reordering,
batch selection and offloading work on them unchanged. Every read dequantizes the whole cache, including the
tokens just written, so prefill and decode both attend to FP8-rounded keys and values. (SGLang's prefill kernels
may attend to the current chunk's fresh BF16 k/v, depending on the attention backend; rounding them too is the
conservative choice and keeps prefill and decode of this engine consistent.)
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers.cache_utils import Cache, DynamicLayer

from precision_engine.errors import UnsupportedError, UsageError
from precision_engine.numerics.formats import DType, Granularity, QuantFormat
from precision_engine.numerics.quantize import cast_to_fp8, scale_from_amax
from precision_engine.policy.model import Calibrate, KVCacheSpec, KVScale

KV_FORMAT = QuantFormat(DType.FLOAT8_E4M3, Granularity.TENSOR)  # static scale per layer (or per head)
KV_FP8_DTYPE = torch.float8_e4m3fn


@dataclass(frozen=True)
class KVScales:
    """Dequant multipliers per layer: `k`, `v` are fp32 [layers] (per tensor) or [layers, kv_heads] (per head)."""

    k: torch.Tensor
    v: torch.Tensor

    @property
    def per_head(self) -> bool:
        return self.k.dim() == 2

    @property
    def num_layers(self) -> int:
        return self.k.shape[0]

    @classmethod
    def ones(cls, num_layers: int) -> KVScales:
        """SGLang's default when no scale file is given."""
        ones = torch.ones(num_layers, dtype=torch.float32)
        return cls(ones, ones.clone())

    @classmethod
    def from_amax(cls, k_amax: torch.Tensor, v_amax: torch.Tensor, mode: KVScale) -> KVScales:
        """Scales from amax [layers, kv_heads]: shared k/v per layer (per_tensor) or separate per head."""
        if mode is KVScale.PER_TENSOR:
            shared = scale_from_amax(torch.maximum(k_amax.amax(dim=1), v_amax.amax(dim=1)), KV_FORMAT)
            return cls(shared, shared.clone())
        return cls(scale_from_amax(k_amax, KV_FORMAT), scale_from_amax(v_amax, KV_FORMAT))


def quantize_kv(states: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """[B, H, T, D] states -> FP8 e4m3fn with a scale of shape [] or [H] (per head)."""
    return cast_to_fp8(states.float(), _broadcastable(scale, states), KV_FORMAT)


def dequantize_kv(states_fp8: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (states_fp8.float() * _broadcastable(scale, states_fp8)).to(dtype)


def _broadcastable(scale: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    scale = scale.to(device=states.device, dtype=torch.float32)
    return scale.view(1, -1, 1, 1) if scale.dim() == 1 else scale


class Fp8KVLayer(DynamicLayer):
    """One layer's cache: `keys` / `values` hold float8_e4m3fn [B, kv_heads, T, head_dim]."""

    def __init__(self, k_scale: torch.Tensor, v_scale: torch.Tensor, **kwargs):
        super().__init__(**kwargs)
        self.k_scale = k_scale
        self.v_scale = v_scale
        self.dtype: torch.dtype | None = None  # compute dtype of the states, restored on read

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.dtype = key_states.dtype
        self.k_scale = self.k_scale.to(self.device)
        self.v_scale = self.v_scale.to(self.device)
        self.keys = torch.empty((*key_states.shape[:2], 0, key_states.shape[3]), dtype=KV_FP8_DTYPE, device=self.device)
        self.values = torch.empty(
            (*value_states.shape[:2], 0, value_states.shape[3]), dtype=KV_FP8_DTYPE, device=self.device
        )
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys = torch.cat([self.keys, quantize_kv(key_states, self.k_scale)], dim=-2)
        self.values = torch.cat([self.values, quantize_kv(value_states, self.v_scale)], dim=-2)
        return dequantize_kv(self.keys, self.k_scale, self.dtype), dequantize_kv(self.values, self.v_scale, self.dtype)


class Fp8KVCache(Cache):
    """A transformers cache whose every layer is an `Fp8KVLayer`; hand it to forward or generate with `cache_kwargs`."""

    def __init__(self, config, scales: KVScales | None = None):
        text_config = config.get_text_config(decoder=True)
        layer_types = getattr(text_config, "layer_types", None) or ["full_attention"] * text_config.num_hidden_layers
        if set(layer_types) != {"full_attention"}:
            raise UnsupportedError(f"FP8 KV cache supports full-attention layers only, not {set(layer_types)}")
        num_layers = text_config.num_hidden_layers
        scales = scales or KVScales.ones(num_layers)
        if scales.num_layers != num_layers:
            raise UsageError(f"KV scales cover {scales.num_layers} layers, the model has {num_layers}")
        super().__init__(layers=[Fp8KVLayer(scales.k[i], scales.v[i]) for i in range(num_layers)])


class _AmaxLayer(DynamicLayer):
    """Records amax of k and v per KV head over valid tokens; stores nothing (one forward pass)."""

    def __init__(self, token_mask: torch.Tensor | None):
        super().__init__()
        self.token_mask = token_mask  # [B, T] bool or None
        self.k_amax: torch.Tensor | None = None
        self.v_amax: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self.k_amax = _head_amax(key_states, self.token_mask)
        self.v_amax = _head_amax(value_states, self.token_mask)
        return key_states, value_states


def _head_amax(states: torch.Tensor, token_mask: torch.Tensor | None) -> torch.Tensor:
    # states [B, H, T, D] -> [H]; NaN propagates through amax (torch.amax keeps NaN). Padding is selected away,
    # not multiplied by 0: a non-finite padded state would give 0 * inf = NaN.
    magnitude = states.detach().float().abs()
    if token_mask is not None:
        magnitude = torch.where(token_mask[:, None, :, None].to(magnitude.device), magnitude, 0.0)
    return magnitude.amax(dim=(0, 2, 3))


def cache_kwargs(model: torch.nn.Module, cache: Cache | None) -> dict:
    """The keyword that hands `cache` to the model's forward or generate.

    transformers renamed `past_key_values` to `cache` during 5.x; both spellings are in use (the H200 image has
    5.17, which takes `past_key_values`), so ask the signature rather than the version.
    """
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    return {name: cache}


def returned_cache(output) -> Cache | None:
    """The cache a forward returned, under either name (see `cache_kwargs`)."""
    return output["cache"] if "cache" in output else output.get("past_key_values")


@torch.no_grad()
def calibrate_kv_scales(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    mode: KVScale = KVScale.PER_TENSOR,
) -> KVScales:
    """Scales from one forward pass over real sequences with the model's current weights (amax / 448).

    Call it on the rollout-phase model: the k/v it sees are the ones the rollout cache will store.
    """
    num_layers = model.config.get_text_config(decoder=True).num_hidden_layers
    token_mask = attention_mask.bool() if attention_mask is not None else None
    recorder = Cache(layers=[_AmaxLayer(token_mask) for _ in range(num_layers)])
    was_training = model.training
    model.eval()
    try:
        model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True, **cache_kwargs(model, recorder))
    finally:
        model.train(was_training)
    missing = [i for i, layer in enumerate(recorder.layers) if layer.k_amax is None]
    if missing:
        raise UnsupportedError(f"layers {missing} wrote no keys/values during calibration")
    k_amax = torch.stack([layer.k_amax.cpu() for layer in recorder.layers])
    v_amax = torch.stack([layer.v_amax.cpu() for layer in recorder.layers])
    return KVScales.from_amax(k_amax, v_amax, mode)


class KVCacheCalibrator:
    """Keeps rollout KV scales in step with the weights, as the policy's `kv_cache.calibrate` says.

    Call `after_weight_update(model)` after every optimizer step (and once before the first rollout); it
    recalibrates on the stored calibration batch when the policy asks for it (`every_weight_update`: FP8-RL's
    scales follow the weights; `once`: the first call only; `never`: SGLang's unit scales). verl and SGLang
    have no such hook, so this is the one place the trainer loop calls.
    """

    def __init__(self, spec: KVCacheSpec, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        if not spec.is_fp8:
            raise UsageError("the policy's kv_cache is not FP8: nothing to calibrate")
        if spec.dtype is not DType.FLOAT8_E4M3:
            raise UnsupportedError("SGLang's FP8 KV cache is float8_e4m3 only")
        self.spec = spec
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.scales: KVScales | None = None

    def after_weight_update(self, model: torch.nn.Module) -> KVScales:
        due = self.spec.calibrate is Calibrate.EVERY_WEIGHT_UPDATE or (
            self.spec.calibrate is Calibrate.ONCE and self.scales is None
        )
        if due:
            self.scales = calibrate_kv_scales(model, self.input_ids, self.attention_mask, mode=self.spec.scale)
        elif self.scales is None:
            self.scales = KVScales.ones(model.config.get_text_config(decoder=True).num_hidden_layers)
        return self.scales

    def new_cache(self, config) -> Fp8KVCache:
        return Fp8KVCache(config, self.scales)


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


__all__ = [
    "KVScales",
    "Fp8KVLayer",
    "Fp8KVCache",
    "KVCacheCalibrator",
    "calibrate_kv_scales",
    "quantize_kv",
    "dequantize_kv",
    "sglang_kv_scales",
    "write_sglang_kv_scales",
    "read_sglang_kv_scales",
]
