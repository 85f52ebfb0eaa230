"""The rollout engine's KV cache: preallocated, position-indexed, BF16 or FP8 with calibrated per-layer scales.

Layout `k`, `v`: [layers, batch, kv_heads, max_len, head_dim], zero-initialised (attention multiplies the
probabilities of slots it cannot see, exactly 0, by these values, so they must be finite). Slot p of a row
holds the key of that row's position p, the layout `numerics.invariant.attention` reads. `max_len` is rounded up
to whole attention blocks.

Cost per step: a write touches only the new tokens' slots (an index_put of [B, T] positions; on the GPU one
Triton launch, `triton_attention.kv_write`, with the same bytes); a read returns
views of the first `length` slots (rounded up to a block), without copying, concatenating or dequantizing:
FP8 blocks are dequantized by attention as it reads them. Nothing depends on how many tokens are cached
beyond what attention itself reads.

FP8: float8_e4m3fn with `numerics.kv_cache.KVScales` (per_tensor: one scale per layer shared by k and v, as
SGLang's; per_head: [layers, kv_heads]), quantized on write with `quantize_kv`; the bits of a read are those
of `dequantize_kv`, the rounding the training forward applies when the policy unifies the phases.
"""

from __future__ import annotations

import torch

from precision_engine.errors import UsageError
from precision_engine.numerics.invariant import KV_BLOCK
from precision_engine.numerics.kv_cache import KV_FP8_DTYPE, KVScales, quantize_kv


class KVCache:
    """Preallocated keys and values for `batch` sequences of up to `max_len` tokens."""

    def __init__(
        self,
        num_layers: int,
        batch: int,
        kv_heads: int,
        max_len: int,
        head_dim: int,
        *,
        dtype: torch.dtype = torch.bfloat16,
        device: torch.device | str = "cpu",
        scales: KVScales | None = None,
    ) -> None:
        if scales is not None and scales.num_layers != num_layers:
            raise UsageError(f"KV scales cover {scales.num_layers} layers, the model has {num_layers}")
        self.max_len = -(-max_len // KV_BLOCK) * KV_BLOCK
        self.dtype = dtype  # the compute dtype keys are written in and read back as
        # Copies: `load_scales` rewrites them in place, and the caller's scales are not ours to change.
        self.scales = None if scales is None else KVScales(*(t.to(device, copy=True) for t in (scales.k, scales.v)))
        storage = KV_FP8_DTYPE if scales is not None else dtype
        shape = (num_layers, batch, kv_heads, self.max_len, head_dim)
        self.k = torch.zeros(shape, dtype=storage, device=device)
        self.v = torch.zeros(shape, dtype=storage, device=device)
        self._rows = torch.arange(batch, device=device)[:, None]  # write's row index: no launch per layer

    @classmethod
    def for_model(cls, model, batch: int, max_len: int, *, scales: KVScales | None = None) -> KVCache:
        """A cache shaped for a `models.decoder.Decoder`, in its compute dtype, on its device."""
        c = model.config
        weight = model.model.embed_tokens.weight
        dtype = model.compute_dtype or weight.dtype
        return cls(c.num_layers, batch, c.num_kv_heads, max_len, c.head_dim, dtype=dtype, device=weight.device,
                   scales=scales)

    @property
    def is_fp8(self) -> bool:
        return self.scales is not None

    @property
    def batch(self) -> int:
        return self.k.shape[1]

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> None:
        """k, v [B, kv_heads, T, head_dim] of rows 0..B-1 into the slots `positions` [B, T]."""
        b, _, t, d = k.shape
        if k.is_cuda and not d & (d - 1) and (self.is_fp8 or k.dtype == self.k.dtype):
            # One launch for both (quantize_kv's bytes when FP8) where the torch ops below launch up to 18.
            from precision_engine.numerics.triton_attention import kv_write

            scales = (self.scales.k[layer], self.scales.v[layer]) if self.is_fp8 else (None, None)
            kv_write(k, v, positions, self.k[layer], self.v[layer], *scales)
            return
        if self.scales is not None:
            k, v = quantize_kv(k, self.scales.k[layer]), quantize_kv(v, self.scales.v[layer])
        rows = self._rows[:b].expand(b, t)
        self.k[layer][rows, :, positions] = k.transpose(1, 2)  # advanced indices first: [B, T, H, D]
        self.v[layer][rows, :, positions] = v.transpose(1, 2)

    def read(self, layer: int, length: int):
        """(k, v, k_scale, v_scale): views of slots [0, length rounded up to a block) of every row, and the
        layer's dequant scales (None for a BF16 cache)."""
        used = min(-(-length // KV_BLOCK) * KV_BLOCK, self.max_len)
        k, v = self.k[layer, :, :, :used], self.v[layer, :, :, :used]
        if self.scales is None:
            return k, v, None, None
        return k, v, self.scales.k[layer], self.scales.v[layer]

    def load_scales(self, scales: KVScales) -> None:
        """Replace an FP8 cache's scales in place (a recalibration), keeping their addresses (a CUDA graph
        reads them)."""
        if self.scales is None or scales.k.shape != self.scales.k.shape:
            raise UsageError("load_scales needs an FP8 cache whose scales have the new scales' shape")
        self.scales.k.copy_(scales.k)
        self.scales.v.copy_(scales.v)

    def fork(self, source: KVCache, rows: torch.Tensor, length: int) -> None:
        """Row i of this cache := row rows[i] of `source`, slots [0, length): prefill once, sample n times."""
        same_format = source.k.dtype == self.k.dtype and source.k.shape[::2] == self.k.shape[::2]
        if not same_format or length > min(source.max_len, self.max_len) or len(rows) != self.batch:
            raise UsageError("fork needs a source cache of the same format and one source row per row")
        rows = rows.to(self.k.device)
        self.k[:, :, :, :length] = source.k[:, rows, :, :length]
        self.v[:, :, :, :length] = source.v[:, rows, :, :length]


__all__ = ["KVCache"]
