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


def test_wgrad_input_blocks_keeps_y_and_dx_bits_and_dw_error():
    """x^T in 128x128 blocks in the wgrad (`wgrad_input`, the fprop's GEMM form): y and dx keep the bits of the 128x1
    form, and dW stays as close to float64 as that form's (2000 tokens: the last token block padded)."""
    torch.manual_seed(2)
    lin = nn.Linear(4096, 1024, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(2, 1000, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(2, 1000, 1024, device="cuda", dtype=torch.bfloat16)
    ref = dy.double().reshape(-1, 1024).t() @ x.detach().double().reshape(-1, 4096)
    out = {}
    for name, extra in (("tokens", {}), ("blocks", {"wgrad_input": P["fp8_block_weight"]})):
        spec = LinearSpec(**JETRL, **extra, kernel=Kernel.AUTO)
        fp8 = Fp8Linear.from_linear(lin, spec, numerics=NumericsSpec(batch_invariant=True))
        y = fp8(x)
        y.backward(dy)
        out[name] = (y.detach(), x.grad, ((lin.weight.grad.double() - ref).norm() / ref.norm()).item())
        x.grad = lin.weight.grad = None
    (y_t, dx_t, err_t), (y_b, dx_b, err_b) = out["tokens"], out["blocks"]
    assert torch.equal(y_t.view(torch.uint16), y_b.view(torch.uint16))
    assert torch.equal(dx_t.view(torch.uint16), dx_b.view(torch.uint16))
    assert err_b < 6e-2 and err_b < 1.05 * err_t, (err_t, err_b)
