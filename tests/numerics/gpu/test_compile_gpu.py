"""torch.compile (inductor, fullgraph) of FP8 linears on the GPU: one graph, and eager's bits.

AUTO's launches there (Triton quantizers, pinned cuBLAS, DeepGEMM where installed, Gluon at decode sizes) reach
the graph only as `numerics.custom_ops`; before them Dynamo broke one training step into 7-8 graphs (nineteenth
session). Training sizes run the prefill GEMMs, 16 rows the decode kernels. Each compile takes 10-40 s.
"""

import pytest
import torch
from torch import nn

from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.formats import LinearSpec
from precision_engine.numerics.fused_linear import fp8_linear_group
from precision_engine.numerics.linear import Fp8Linear

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
JETRL = LinearSpec(weight=P["fp8_block_weight"], input=P["fp8_group_act"], grad_output=P["fp8_group_act"],
                   wgrad_operands=P["fp8_group_tokens"])


def _layer(n, k, seed):
    torch.manual_seed(seed)
    return Fp8Linear.from_linear(nn.Linear(k, n, bias=False, dtype=torch.bfloat16, device="cuda"), JETRL)


def _grads(step, x, parts):
    for part in parts:
        part.invalidate_weight_cache()
    x = x.clone().requires_grad_()
    step(x).backward()
    grads = [x.grad] + [part.weight.grad.clone() for part in parts]
    for part in parts:
        part.weight.grad = None
    return grads


def _bits(t):
    return t.view(torch.uint8)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("m", [1024, 200])
def test_compiled_training_step_is_one_graph_with_eager_bits(fused, m):
    parts = [_layer(1024, 1024, 1), _layer(256, 1024, 2), _layer(256, 1024, 3)] if fused else [_layer(1024, 1024, 0)]

    def step(x):
        outputs = fp8_linear_group(parts, x) if fused else (parts[0](x),)
        return sum(y.float().square().sum() for y in outputs)

    x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(step)(x.clone().requires_grad_())
    assert explanation.graph_break_count == 0, explanation.break_reasons
    eager = _grads(step, x, parts)
    compiled = _grads(torch.compile(step, fullgraph=True), x, parts)
    for a, b in zip(eager, compiled):
        assert torch.equal(_bits(a), _bits(b))


def test_one_block_row_of_weight_compiles_with_eager_bits():
    """A 128-wide output (a small model's k/v): its Q(W)^T scales are their own transpose, which the
    transpose op copies rather than hand back its input (a compile error before)."""
    parts = [_layer(128, 1024, 5)]
    x = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()

    def step(x):
        return parts[0](x).float().square().sum()

    for a, b in zip(_grads(step, x, parts), _grads(torch.compile(step, fullgraph=True), x, parts)):
        assert torch.equal(_bits(a), _bits(b))


@pytest.mark.parametrize("m", [1, 16, 64, 1024])
def test_compiled_no_grad_forward_is_one_graph_with_eager_bits(m):
    layer = _layer(4096, 1024, 4)
    x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad():
        explanation = torch._dynamo.explain(layer)(x)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        assert torch.equal(_bits(layer(x)), _bits(torch.compile(layer, fullgraph=True)(x)))
