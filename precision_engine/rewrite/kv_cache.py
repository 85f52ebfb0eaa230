"""The FP8 KV cache as a transformers `Cache`, and the calibrator that keeps its scales in step with the weights.

The quantization is `numerics.kv_cache` (SGLang's format; read its docstring). The cache layer keeps the FP8
tensors in `keys` / `values`, so transformers' own cropping, beam reordering, batch selection and offloading
work on them unchanged. Every read dequantizes the whole cache, including the tokens just written, so prefill
and decode both attend to FP8-rounded keys and values. (SGLang's prefill kernels may attend to the current
chunk's fresh BF16 k/v, depending on the attention backend; rounding them too is the conservative choice and
keeps prefill and decode of this engine consistent.)
"""

from __future__ import annotations

import inspect

import torch
from transformers.cache_utils import Cache, DynamicLayer

from precision_engine.errors import UnsupportedError, UsageError
from precision_engine.numerics.formats import DType
from precision_engine.numerics.kv_cache import KV_FP8_DTYPE, KVScales, dequantize_kv, head_amax, quantize_kv
from precision_engine.numerics.specs import Calibrate, KVCacheSpec, KVScale


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
        self.k_amax = head_amax(key_states, self.token_mask)
        self.v_amax = head_amax(value_states, self.token_mask)
        return key_states, value_states


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
    if hasattr(model, "kv_amax"):  # models.decoder.Decoder records its own amax (it has no transformers Cache)
        return KVScales.from_amax(*model.kv_amax(input_ids, attention_mask), mode)
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
            raise UnsupportedError("the FP8 KV cache is float8_e4m3 only (validate refuses float8_e5m2)")
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
