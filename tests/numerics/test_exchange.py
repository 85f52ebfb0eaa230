"""The block-FP8 exchange format (verl weight sync / SGLang block-FP8 loader layout)."""

from __future__ import annotations

import pytest
import torch

from precision_engine.errors import OperandError
from precision_engine.numerics.exchange import BLOCK_FP8, from_block_fp8, to_block_fp8
from precision_engine.numerics.quantize import quantize_blocks


def loader_layout_by_hand(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An independent, loop-per-block statement of the layout: amax over the real elements of each 128x128
    block, scale = max(amax, 1e-10) / 448 in fp32, q = e4m3(clamp(w / scale, +-448))."""
    n, k = w.shape
    weight = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    scale_inv = torch.empty(-(-n // 128), -(-k // 128))
    for i in range(scale_inv.shape[0]):
        for j in range(scale_inv.shape[1]):
            block = w[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128].float()
            s = torch.clamp(block.abs().max(), min=1e-10) / 448.0
            scale_inv[i, j] = s
            q = (block / s).clamp(-448, 448).to(torch.float8_e4m3fn)
            weight[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128] = q
    return weight, scale_inv


@pytest.mark.parametrize("shape", [(256, 384), (300, 200), (1, 129), (128, 128)])
def test_layout_matches_the_loader_format_bytewise(shape):
    w = torch.randn(shape, dtype=torch.bfloat16) * 0.02
    weight, scale_inv = to_block_fp8(w)
    expected_w, expected_s = loader_layout_by_hand(w)
    assert weight.dtype == torch.float8_e4m3fn and weight.shape == shape and weight.is_contiguous()
    assert scale_inv.dtype == torch.float32 and scale_inv.shape == (-(-shape[0] // 128), -(-shape[1] // 128))
    assert torch.equal(weight.view(torch.uint8), expected_w.view(torch.uint8))
    assert torch.equal(scale_inv, expected_s)


def test_same_bytes_as_the_trainer_quantizer():
    w = torch.randn(384, 256, dtype=torch.bfloat16)
    weight, scale_inv = to_block_fp8(w)
    q = quantize_blocks(w, BLOCK_FP8)
    assert torch.equal(weight.view(torch.uint8), q.data.view(torch.uint8)) and torch.equal(scale_inv, q.scale)


def test_round_trip_error_is_within_half_an_fp8_ulp():
    w = torch.randn(200, 300) * 0.05
    weight, scale_inv = to_block_fp8(w)
    back = from_block_fp8(weight, scale_inv, dtype=torch.float32)
    assert back.shape == w.shape
    # Half an ulp relative (3 mantissa bits), or half the subnormal quantum 2**-9 times the block scale.
    assert torch.all((back - w).abs() <= 2.0**-4 * w.abs() + 2.0**-10 * scale_inv.max())
    assert from_block_fp8(*to_block_fp8(w)).dtype == torch.bfloat16


def test_zero_block_round_trips_to_zero():
    w = torch.zeros(130, 130)
    weight, scale_inv = to_block_fp8(w)
    assert torch.all(torch.isfinite(scale_inv)) and torch.equal(from_block_fp8(weight, scale_inv, torch.float32), w)


def test_mismatched_checkpoint_tensors_are_an_operand_error():
    weight, scale_inv = to_block_fp8(torch.randn(256, 256))
    with pytest.raises(OperandError, match="expected \\(2, 2\\)"):
        from_block_fp8(weight, scale_inv[:1])
    with pytest.raises(OperandError, match="float8_e4m3fn"):
        from_block_fp8(weight.float(), scale_inv)


def test_the_same_bad_operand_raises_the_same_type_everywhere():
    """An FP8 tensor where a high-precision one belongs, and a malformed weight: OperandError from the
    quantizers, the GEMMs and the exchange format alike (a ValueError too, for callers that catch that)."""
    from precision_engine.numerics.formats import PRESET_FORMATS
    from precision_engine.numerics.gemm import fp8_gemm
    from precision_engine.numerics.quantize import quantize_rows_1xG

    weight, scale_inv = to_block_fp8(torch.randn(256, 256))
    x = quantize_rows_1xG(torch.randn(4, 256), PRESET_FORMATS["fp8_group_act"])
    wq = quantize_blocks(torch.randn(256, 256), BLOCK_FP8)
    for bad in (lambda: quantize_blocks(weight, BLOCK_FP8),
                lambda: fp8_gemm(x, type(wq)(wq.data, wq.scale[:1], wq.fmt)),
                lambda: from_block_fp8(weight, scale_inv[:1])):
        with pytest.raises(OperandError) as raised:
            bad()
        assert isinstance(raised.value, ValueError)
