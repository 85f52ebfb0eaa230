"""`triton_attention.backward_inputs` (what the batch-invariant attention's backward hands cuDNN's on the GPU) gives
the bytes of the torch ops it replaces: the grad with blind queries' rows zeroed, in q's dtype and out's layout, and
k, v zeroed past kv_len; NaN in a dropped row leaves as +0. Triton's interpreter on the CPU (small shapes)."""

import pytest
import torch

from precision_engine.numerics.contract import TRITON_INTERPRET
from precision_engine.numerics.triton_attention import backward_inputs, backward_inputs_fit

pytestmark = pytest.mark.skipif(not TRITON_INTERPRET, reason="Triton's interpreter (TRITON_INTERPRET=1)")


def test_masks_match_the_torch_ops_bitwise():
    gen = torch.Generator().manual_seed(7)
    b, hq, hkv, t, d = 3, 4, 2, 10, 16
    q_pos = torch.arange(t).repeat(b, 1)
    q_pos[0, 7:] = -1  # right padding
    q_pos[2, :] = -1  # a sequence that sees nothing
    kv_len = torch.tensor([7, 10, 0])
    out = torch.randn(b, t, hq, d, generator=gen).to(torch.bfloat16).transpose(1, 2)  # [B, Hq, T, D], token-major
    grad = torch.randn(b, hq, t, d, generator=gen).to(torch.bfloat16)
    grad[0, :, 8] = float("nan")  # a blind query's grad
    k = torch.randn(b, hkv, t, d, generator=gen).to(torch.bfloat16)
    v = torch.randn(b, hkv, t, d, generator=gen).to(torch.bfloat16)
    k[0, :, 9], v[1, :, 9] = float("inf"), float("nan")  # k past kv_len; v inside it stays
    blind = (q_pos < 0) | (kv_len[:, None] < 1)
    want_grad = grad.masked_fill(blind[:, None, :, None], 0)
    filled = (torch.arange(t) < kv_len[:, None])[:, None, :, None]
    got_grad, kz, vz = backward_inputs(grad, k, v, q_pos, kv_len, out)
    assert got_grad.stride() == out.stride() and got_grad.dtype == out.dtype
    for got, want in ((got_grad, want_grad), (kz, torch.where(filled, k, 0)), (vz, torch.where(filled, v, 0))):
        assert torch.equal(got.view(torch.int16), want.contiguous().view(torch.int16))


def test_refuses_a_grad_in_another_dtype():
    x = torch.zeros(1, 1, 4, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="must be contiguous, a power of 2 long and in torch.bfloat16"):
        backward_inputs(x.float(), x, x, torch.zeros(1, 4, dtype=torch.long), torch.tensor([4]), x)


def test_fit_sends_expanded_grads_other_head_dims_and_strided_positions_to_the_torch_ops():
    k = torch.zeros(1, 2, 8, 128, dtype=torch.bfloat16)
    grad = torch.zeros(1, 4, 8, 128, dtype=torch.bfloat16)
    pos, lens = torch.arange(8).expand(1, 8), torch.tensor([8])
    assert backward_inputs_fit(grad, k, k, pos, lens)
    token_major = torch.zeros(1, 8, 4, 128).transpose(1, 2)  # its rows are contiguous
    assert backward_inputs_fit(token_major, k, k, pos, lens)
    assert not backward_inputs_fit(torch.ones(()).expand(1, 4, 8, 128), k, k, pos, lens)  # out.sum()'s grad
    k96 = torch.zeros(1, 2, 8, 96, dtype=torch.bfloat16)
    assert not backward_inputs_fit(torch.zeros(1, 4, 8, 96), k96, k96, pos, lens)
    assert not backward_inputs_fit(grad, k, k, torch.zeros(8, 2, dtype=torch.long).t()[:1], lens)
    assert not backward_inputs_fit(grad, k, k, pos, torch.tensor([[8, 0]])[:, 0])
