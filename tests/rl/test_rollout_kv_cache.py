"""The preallocated KV cache: BF16 and FP8 round trips against numerics.kv_cache, fork, and O(new tokens) steps."""

import time

import pytest
import torch

from precision_engine.errors import UsageError
from precision_engine.numerics.invariant import KV_BLOCK
from precision_engine.numerics.kv_cache import KV_FP8_DTYPE, KVScales, dequantize_kv, quantize_kv
from precision_engine.rl.kv_cache import KVCache

LAYERS, BATCH, HEADS, HEAD_DIM = 2, 3, 2, 64


def _states(t: int, seed: int) -> torch.Tensor:
    return torch.randn(BATCH, HEADS, t, HEAD_DIM, generator=torch.Generator().manual_seed(seed)).bfloat16()


def _scales(per_head: bool) -> KVScales:
    amax = torch.rand(LAYERS, HEADS, generator=torch.Generator().manual_seed(0)) * 4 + 1
    return KVScales.from_amax(amax, amax * 1.5, "per_head" if per_head else "per_tensor")


@pytest.mark.parametrize("fmt", ["bf16", "fp8_per_tensor", "fp8_per_head"])
def test_write_then_read_round_trips_as_numerics_kv_cache(fmt):
    scales = None if fmt == "bf16" else _scales(fmt == "fp8_per_head")
    cache = KVCache(LAYERS, BATCH, HEADS, 50, HEAD_DIM, scales=scales)
    assert cache.max_len % KV_BLOCK == 0 and cache.max_len >= 50
    assert cache.k.dtype == (torch.bfloat16 if scales is None else KV_FP8_DTYPE)
    prefill_k, prefill_v = _states(7, 1), _states(7, 2)
    cache.write(1, prefill_k, prefill_v, torch.arange(7).expand(BATCH, 7))
    step_k, step_v = _states(1, 3), _states(1, 4)
    ragged = torch.tensor([[7], [9], [33]])  # rows at different positions
    cache.write(1, step_k, step_v, ragged)
    k, v, k_scale, v_scale = cache.read(1, 34)
    assert k.shape[2] == 2 * KV_BLOCK  # 34 slots rounded up to whole blocks
    if scales is None:
        assert k_scale is None
        stored_k, expect_k = k, prefill_k
        stored_v, expect_v = v, prefill_v
    else:
        assert torch.equal(k_scale, scales.k[1]) and torch.equal(v_scale, scales.v[1])
        stored_k, expect_k = k.view(torch.uint8), quantize_kv(prefill_k, scales.k[1]).view(torch.uint8)
        stored_v, expect_v = v.view(torch.uint8), quantize_kv(prefill_v, scales.v[1]).view(torch.uint8)
        back = dequantize_kv(k[:, :, :7], k_scale, torch.bfloat16)
        assert torch.equal(back, dequantize_kv(quantize_kv(prefill_k, scales.k[1]), scales.k[1], torch.bfloat16))
    assert torch.equal(stored_k[:, :, :7], expect_k) and torch.equal(stored_v[:, :, :7], expect_v)
    for row, pos in enumerate(ragged[:, 0].tolist()):
        got = k[row, :, pos].float() if scales is None else dequantize_kv(k[row : row + 1, :, pos : pos + 1],
                                                                         k_scale, torch.bfloat16)[0, :, 0].float()
        want = step_k[row, :, 0] if scales is None else dequantize_kv(
            quantize_kv(step_k[row : row + 1], scales.k[1]), scales.k[1], torch.bfloat16)[0, :, 0]
        assert torch.equal(got, want.float())
    assert (cache.k[0].float() == 0).all()  # other layers untouched
    assert (k[1, :, 10:33].float() == 0).all()  # and slots never written stay zero


def test_fork_copies_prompt_rows():
    source = KVCache(LAYERS, 2, HEADS, 10, HEAD_DIM)
    source.write(0, _states(5, 5)[:2], _states(5, 6)[:2], torch.arange(5).expand(2, 5))
    target = KVCache(LAYERS, 4, HEADS, 40, HEAD_DIM)
    target.fork(source, torch.tensor([0, 0, 1, 1]), 5)
    assert torch.equal(target.k[:, [0, 1, 2, 3], :, :5], source.k[:, [0, 0, 1, 1], :, :5])
    with pytest.raises(UsageError):
        target.fork(KVCache(LAYERS, 2, HEADS, 10, HEAD_DIM, scales=KVScales.ones(LAYERS)), torch.tensor([0] * 4), 5)


def test_per_step_cost_does_not_grow_with_cached_tokens():
    """A decode step's cache work (write one token, read the views attention walks) is O(1) in the history:
    reads are views of the preallocated storage (no copy, concatenation or dequantization), writes touch the
    new slots only. Timed: the step at 8k cached tokens costs about what it costs at 32, while the
    concatenate-and-dequantize cache this replaces grows with the history."""
    cache = KVCache(LAYERS, BATCH, HEADS, 8192 + KV_BLOCK, HEAD_DIM, scales=KVScales.ones(LAYERS))
    k_new, v_new = _states(1, 7), _states(1, 8)

    def step(length: int):
        cache.write(0, k_new, v_new, torch.full((BATCH, 1), length - 1))
        return cache.read(0, length)

    k, v, _, _ = step(8192)
    assert k.untyped_storage().data_ptr() == cache.k.untyped_storage().data_ptr()  # a view, not a copy

    def best_of(fn, reps=30) -> float:
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    short, long = best_of(lambda: step(32)), best_of(lambda: step(8192))
    history = torch.zeros(BATCH, HEADS, 8192, HEAD_DIM, dtype=KV_FP8_DTYPE)

    def old_step():  # what the transformers-Cache FP8 layer did per step: cat, then dequantize everything
        grown = torch.cat([history, quantize_kv(k_new, torch.tensor(1.0))], dim=2)
        return dequantize_kv(grown, torch.tensor(1.0), torch.bfloat16)

    assert long < 3 * short + 1e-4
    assert best_of(old_step, reps=5) > 5 * long
