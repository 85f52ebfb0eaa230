"""The FP8 linear's GPU launches as torch custom ops (`numerics.custom_ops`), checked on the CPU.

On a GPU, torch.compile meets the launches Dynamo cannot trace (DeepGEMM, pinned cuBLAS, Gluon, Triton launch
wrappers) only as these ops. Here each op passes torch.library.opcheck (schema, fake tensors against the real
outputs' shapes, dtypes and strides, AOT dispatch), and with the CPU routed through the ops as a GPU is, a
compiled training step and a compiled no-grad forward are one graph each, hold the ops, and give eager's bits
(inductor's too). The GPU run of the same: tests/numerics/gpu/test_compile_gpu.py.
"""

import shutil
from dataclasses import replace

import pytest
import torch
from torch import nn

from precision_engine.numerics import custom_ops
from precision_engine.numerics.capabilities import Gemm
from precision_engine.numerics.formats import PRESET_FORMATS, LinearSpec, QuantFormat, ScaleKind
from precision_engine.numerics.fused_linear import fp8_linear_group
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG, quantize_tokens_transposed

from helpers import GraphRecorder

P = PRESET_FORMATS
JETRL = LinearSpec(weight=P["fp8_block_weight"], input=P["fp8_group_act"], grad_output=P["fp8_group_act"],
                   wgrad_operands=P["fp8_group_tokens"])
WGRAD_BLOCKS = replace(JETRL, wgrad_input=P["fp8_block_weight"])  # x^T re-quantized in 128x128 blocks
# The ops a compiled training step holds (transpose_operand serves the eager weight cache only).
OPS = ("quantize", "quantize_blocks_stacked", "quantize_grad_output", "requantize_tokens_transposed", "fp8_gemm")


@pytest.mark.parametrize("fmt", [f for f in P.values() if f.is_quantized]
                         + [QuantFormat(**{**P["fp8_group_act"].__dict__, "scale": ScaleKind.POW2})])
def test_format_key_round_trips(fmt):
    assert custom_ops.parse_format(custom_ops.format_key(fmt)) == fmt


def _opcheck(op, args):
    """opcheck's schema test multiplies inputs, which FP8 tensors refuse on the CPU: it runs on BF16 inputs only."""
    fp8_in = any(isinstance(a, torch.Tensor) and a.dtype == torch.float8_e4m3fn for a in args)
    utils = ("test_faketensor", "test_aot_dispatch_dynamic") + (() if fp8_in else ("test_schema",))
    torch.library.opcheck(op, args, test_utils=utils)


@pytest.mark.parametrize("kind, fmt, shape", [
    ("rows", "fp8_group_act", (7, 300)), ("blocks", "fp8_block_weight", (200, 300)),
    ("tokens_t", "fp8_group_tokens", (130, 256)), ("tensor", "fp8_tensor", (3, 5, 8)),
    ("channel", "fp8_channel", (6, 40)),
])
def test_quantize_op_fake_matches_the_quantizer(kind, fmt, shape):
    """Odd sizes on purpose: partial groups, blocks and token padding shape the scales."""
    x = torch.randn(shape, dtype=torch.bfloat16)
    _opcheck(torch.ops.precision_engine.quantize.default, (x, kind, custom_ops.format_key(P[fmt])))


def test_grad_output_requantize_and_transpose_ops_fakes_match():
    dy = torch.randn(130, 256, dtype=torch.bfloat16)
    rows, tokens = custom_ops.format_key(P["fp8_group_act"]), custom_ops.format_key(P["fp8_group_tokens"])
    _opcheck(torch.ops.precision_engine.quantize_grad_output.default, (dy, rows, tokens))
    xq = quantize_rows_1xG(torch.randn(130, 256), P["fp8_group_act"])
    _opcheck(torch.ops.precision_engine.requantize_tokens_transposed.default, (xq.data, xq.scale, rows, tokens))
    for shape in ((384, 256), (128, 896), (896, 100)):  # one block row / column: scales their own transpose
        wq = quantize_blocks(torch.randn(shape), P["fp8_block_weight"])
        _opcheck(torch.ops.precision_engine.transpose_operand.default,
                 (wq.data, wq.scale, custom_ops.format_key(wq.fmt)))


@pytest.mark.parametrize("fmt", [P["fp8_block_weight"], replace(P["fp8_block_weight"], scale=ScaleKind.POW2)],
                         ids=lambda f: f.describe())
@pytest.mark.parametrize("shape", [(130, 256), (256, 200), (1, 128)], ids=str)  # padded tokens, a partial block
def test_requantize_blocks_op_fake_matches(fmt, shape):
    xq = quantize_rows_1xG(torch.randn(shape), P["fp8_group_act"])
    _opcheck(torch.ops.precision_engine.requantize_blocks_transposed.default,
             (xq.data, xq.scale, custom_ops.format_key(xq.fmt), custom_ops.format_key(fmt)))


@pytest.mark.parametrize("rows, transposed", [((384,), True), ((256, 128, 100), True), ((256, 128), False)])
def test_quantize_blocks_stacked_op_fake_matches(rows, transposed):
    weights = [torch.randn(r, 200, dtype=torch.bfloat16) for r in rows]
    _opcheck(torch.ops.precision_engine.quantize_blocks_stacked.default,
             (weights, custom_ops.format_key(P["fp8_block_weight"]), transposed))


@pytest.mark.parametrize("gemm", [Gemm.FPROP, Gemm.WGRAD])
def test_fp8_gemm_op_fake_matches_the_gemm(gemm):
    if gemm is Gemm.FPROP:
        a = quantize_rows_1xG(torch.randn(5, 256), P["fp8_group_act"])
        b = quantize_blocks(torch.randn(384, 256), P["fp8_block_weight"])
    else:
        a = quantize_tokens_transposed(torch.randn(130, 384), P["fp8_group_tokens"])
        b = quantize_tokens_transposed(torch.randn(130, 256), P["fp8_group_tokens"])
    args = (a.data, a.scale, custom_ops.format_key(a.fmt), b.data, b.scale, custom_ops.format_key(b.fmt),
            torch.bfloat16, "auto", gemm.value, True)
    _opcheck(torch.ops.precision_engine.fp8_gemm.default, args)


def test_the_bias_gradients_op_passes_opcheck():
    _opcheck(torch.ops.precision_engine.bias_grad.default, (torch.randn(5, 7, dtype=torch.bfloat16),))


def test_outside_compile_nothing_routes():
    assert not custom_ops.routes()


def _layer(n=384, k=256, seed=0, spec=JETRL):
    torch.manual_seed(seed)
    return Fp8Linear.from_linear(nn.Linear(k, n, dtype=torch.bfloat16), spec)


def _grads(step, x, params):
    x = x.clone().requires_grad_()
    step(x).backward()
    grads = [x.grad] + [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    return grads


@pytest.mark.parametrize("fused", [False, True])
def test_compiled_training_step_is_one_graph_of_the_ops_with_eager_bits(fused):
    """Takes about 10-20 s on 2 CPU cores (compilation)."""
    torch._dynamo.reset()
    parts = [_layer(256, seed=1), _layer(128, seed=2), _layer(128, seed=3)] if fused else [_layer()]
    params = [p for part in parts for p in part.parameters()]

    def step(x):
        outputs = fp8_linear_group(parts, x) if fused else (parts[0](x),)
        return sum(y.float().square().sum() for y in outputs)

    x = torch.randn(2, 70, 256, dtype=torch.bfloat16)
    eager = _grads(step, x, params)
    recorder = GraphRecorder()
    compiled = _grads(torch.compile(step, backend=recorder, fullgraph=True), x, params)
    assert len(recorder.code) == 1
    assert all(f"precision_engine.{op}" in recorder.code[0] for op in OPS)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


def test_compiled_step_requantizes_x_into_blocks_as_one_op():
    """With `wgrad_input` in 128x128 blocks the wgrad takes x^T from the blocks re-quantizer's op, in a single
    graph, with eager's bits."""
    torch._dynamo.reset()
    layer = _layer(spec=WGRAD_BLOCKS)
    params = list(layer.parameters())

    def step(x):
        return layer(x).float().square().sum()

    x = torch.randn(200, 256, dtype=torch.bfloat16)
    recorder = GraphRecorder()
    compiled = _grads(torch.compile(step, backend=recorder, fullgraph=True), x, params)
    assert len(recorder.code) == 1 and "precision_engine.requantize_blocks_transposed" in recorder.code[0]
    assert "precision_engine.requantize_tokens_transposed" not in recorder.code[0]
    for a, b in zip(_grads(step, x, params), compiled):
        assert torch.equal(a, b)


def test_compiled_no_grad_forward_is_one_graph_of_the_ops_with_eager_bits():
    """Rollout's call: no autograd Function (torch.compile cannot trace its forward under no_grad)."""
    torch._dynamo.reset()
    layer = _layer()
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    recorder = GraphRecorder()
    with torch.no_grad():
        eager = layer(x)
        compiled = torch.compile(layer, backend=recorder, fullgraph=True)(x)
    assert len(recorder.code) == 1 and "precision_engine.fp8_gemm" in recorder.code[0]
    assert torch.equal(eager, compiled)


def test_compiled_step_with_dynamic_tokens_compiles_once_with_eager_bits():
    """RL micro-batches change their token count every step: with dynamic shapes one graph serves them (the
    fakes' shapes are symbolic in the tokens), each with eager's bits. Above 128 tokens, that is: the 128-token
    scale groups along tokens number 1 below, and torch specializes a size-1 dimension (one more graph)."""
    torch._dynamo.reset()
    layer = _layer()
    params = list(layer.parameters())
    recorder = GraphRecorder()
    compiled = torch.compile(lambda x: layer(x).float().square().sum(), backend=recorder, fullgraph=True,
                             dynamic=True)
    for tokens in (130, 257, 600):
        x = torch.randn(tokens, 256, dtype=torch.bfloat16)
        eager = _grads(lambda x: layer(x).float().square().sum(), x, params)
        for a, b in zip(eager, _grads(compiled, x, params)):
            assert torch.equal(a, b)
    assert len(recorder.code) == 1


@pytest.mark.skipif(shutil.which("c++") is None, reason="inductor's CPU code needs a C++ compiler")
def test_inductor_keeps_the_gemms_output_rounding_before_the_bias():
    """Traced, the CPU GEMM's bf16 output cast fused into the bias add after it (430 of 1,536 outputs off, dW too);
    as an op it stays a rounding of its own. ~20 s: inductor compiles C++ for forward and backward."""
    torch._dynamo.reset()
    layer = _layer()
    x = torch.randn(4, 256, dtype=torch.bfloat16)

    def step(inp):
        return layer(inp).float().square().sum()

    eager = _grads(step, x, list(layer.parameters()))
    layer.zero_grad()
    compiled = _grads(torch.compile(step, fullgraph=True), x, list(layer.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled))
