"""Fp8Linear on the GPU: gradients against BF16 nn.Linear, and rollout/training forward bitwise equal."""

import pytest
import torch
from torch import nn

from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.formats import Kernel, LinearSpec
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.policy.model import NumericsSpec

from helpers import sqnr_db

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

JETRL = dict(weight=P["fp8_block_weight"], input=P["fp8_group_act"], grad_output=P["fp8_group_act"],
             wgrad_operands=P["fp8_group_tokens"])


@pytest.mark.parametrize("kernel,batch_invariant", [(Kernel.CUBLAS, False), (Kernel.AUTO, True), (Kernel.TRITON, True),
                                                    (Kernel.CUBLAS_PINNED, True)])
def test_fp8_linear_close_to_bf16(kernel, batch_invariant):
    torch.manual_seed(0)
    lin = nn.Linear(4096, 1024, device="cuda", dtype=torch.bfloat16)
    fp8 = Fp8Linear.from_linear(lin, LinearSpec(**JETRL, kernel=kernel), numerics=NumericsSpec(batch_invariant=batch_invariant))
    x = torch.randn(2, 1000, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(2, 1000, 1024, device="cuda", dtype=torch.bfloat16)
    y = fp8(x)
    y.backward(dy)
    dx, dw, db = x.grad, lin.weight.grad, lin.bias.grad
    x.grad = lin.weight.grad = lin.bias.grad = None
    y_ref = lin(x)
    y_ref.backward(dy)
    assert sqnr_db(y_ref, y) >= 25
    assert sqnr_db(x.grad, dx) >= 20
    assert sqnr_db(lin.weight.grad, dw) >= 20
    assert sqnr_db(lin.bias.grad, db) >= 40  # bias grad is a plain sum of dy in fp32
    assert dw.dtype == torch.bfloat16 and dx.dtype == torch.bfloat16


def test_rollout_rows_equal_training_rows_bitwise():
    """Decode-sized forwards give the bytes of the same rows inside a 4096-token training forward."""
    torch.manual_seed(1)
    lin = nn.Linear(4096, 6144, bias=False, device="cuda", dtype=torch.bfloat16)
    fp8 = Fp8Linear.from_linear(lin, LinearSpec(**JETRL), numerics=NumericsSpec(batch_invariant=True))
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        full = fp8(x)
        for m in (1, 7, 128):
            assert torch.equal(fp8(x[:m]).view(torch.uint16), full[:m].view(torch.uint16)), f"M={m}"
