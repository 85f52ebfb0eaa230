"""FP8 KV-cache math: SGLang's quantizer contract, per-head amax over valid tokens."""

import math

import torch

from precision_engine.numerics.kv_cache import dequantize_kv, head_amax, quantize_kv


def test_quantize_kv_contract():
    states = (torch.randn(2, 3, 5, 64, dtype=torch.float64) * 3).float()
    scale = torch.tensor(0.01)
    q = quantize_kv(states.to(torch.bfloat16), scale)
    assert q.dtype == torch.float8_e4m3fn
    expected = torch.clamp(states.to(torch.bfloat16).float() / scale, -448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(q.view(torch.uint8), expected.view(torch.uint8))
    assert q.float().abs().max() == 448  # out-of-range values saturate, never NaN
    per_head = torch.tensor([0.01, 0.02, 0.04])
    q = quantize_kv(states, per_head)
    back, states = dequantize_kv(q, per_head, torch.float64), states.double()
    inside = states.abs() <= 448 * per_head.view(1, -1, 1, 1)
    rel = ((back - states).abs() / states.abs().clamp(min=1e-3))[inside & (states.abs() > 64 * 2**-6 * 0.04)]
    assert rel.max() <= 2**-4  # e4m3: 3 mantissa bits, half-ulp relative error in the normal range


def test_calibration_ignores_nonfinite_padding():
    """Padded positions are excluded, not multiplied by 0: a NaN/Inf there (0 * inf = NaN) must not reach
    the scales."""
    states = torch.randn(2, 3, 6, 8)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    states[1, :, 4] = math.inf
    states[1, :, 5] = math.nan
    expected = torch.maximum(states[0].abs().amax(dim=(1, 2)), states[1, :, :4].abs().amax(dim=(1, 2)))
    assert torch.equal(head_amax(states, mask), expected)
    states[0, 2, 1] = math.nan  # a valid token's NaN still propagates
    assert torch.isnan(head_amax(states, mask)[2])


def test_infinities_are_never_saturated():
    """+-Inf used to be clamped to +-448 * scale in silence; they become NaN, and nonfinite=error raises
    (issue 8, item 3). Finite values beyond the range still saturate."""
    import pytest

    from precision_engine.errors import NonFiniteError

    states = torch.randn(1, 2, 4, 8, generator=torch.Generator().manual_seed(0))
    states[0, 0, 1, 3], states[0, 1, 2, 0], states[0, 1, 0, 0] = math.inf, -math.inf, 1e6
    back = dequantize_kv(quantize_kv(states, torch.tensor(0.01)), torch.tensor(0.01), torch.float32)
    assert torch.isnan(back[0, 0, 1, 3]) and torch.isnan(back[0, 1, 2, 0])
    assert back[0, 1, 0, 0] == 448 * torch.tensor(0.01)
    assert torch.isnan(back).sum() == 2
    with pytest.raises(NonFiniteError, match="KV cache write"):
        quantize_kv(states, torch.tensor(0.01), nonfinite="error")
    with pytest.warns(RuntimeWarning, match="2 of 64 elements"):
        quantize_kv(states, torch.tensor(0.01), nonfinite="warn")


def test_misuse_is_named_not_left_to_a_broadcast():
    """A scale of the wrong length, 3-D states, FP8 fed back in: each gets an OperandError that says what fits."""
    import pytest

    from precision_engine.errors import OperandError

    states = torch.randn(2, 4, 8, 16, dtype=torch.bfloat16)
    for call, words in (
        (lambda: quantize_kv(states, torch.ones(3)), r"\[\] \(per tensor\) or \[4\] \(per KV head\)"),
        (lambda: quantize_kv(states, torch.ones(4, 1)), r"got shape \(4, 1\)"),
        (lambda: quantize_kv(states[0], torch.ones(4)), r"\[H\] \(per KV head, for \[B, H, T, D\]\)"),
        (lambda: quantize_kv(states, torch.ones((), dtype=torch.int32)), "float dequant multiplier"),
        (lambda: quantize_kv(states.to(torch.float8_e4m3fn), torch.ones(())), "bf16/fp16/fp32 states"),
        (lambda: dequantize_kv(states, torch.ones(()), torch.bfloat16), "float8_e4m3fn states"),
    ):
        with pytest.raises(OperandError, match=words):
            call()
    q = quantize_kv(states, torch.full((4,), 0.01))  # both scale shapes still work
    assert dequantize_kv(q, torch.full((), 0.01), torch.float32).shape == states.shape
