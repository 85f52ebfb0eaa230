"""Grouped FP8 linears (q/k/v, gate/up as one GEMM per pass) against the same modules run one by one.

On the CPU the forward's reference kernel is exact, so grouped and separate forwards are equal bitwise. Backward
tolerances (fresh random inputs):
- dx: the grouped dgrad sums the parts inside one GEMM and rounds once, so with the exact reference kernel it is
  within 0.5 BF16 ulp (plus float64 slack) of the FP8 dataflow's value, dequant(Q(dy)) @ dequant(Q(W)) in
  float64; with AUTO's fp32 emulation normwise within 2^-9 of it. The separate backward adds three BF16 dx, so both
  differ by BF16 rounding only: ||grouped - separate|| / ||grouped|| <= 2^-8. Against float64 on the BF16
  data (the quantization error included) both keep torchao's blockwise floor, SQNR >= 20 dB, within 0.1 dB.
- dW, db: every row multiplies the same FP8 operands as the part alone: bitwise equal under the reference
  kernel, within 1 BF16 ulp under AUTO's emulation.
"""

import dataclasses

import pytest
import torch
from torch import nn

from precision_engine.errors import OperandError, UnsupportedError
from precision_engine.numerics.exchange import to_block_fp8
from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.formats import Kernel, LinearSpec
from precision_engine.numerics.fused_linear import fp8_linear_group, shares_one_gemm
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.quantize import dequantize, quantize_blocks, quantize_rows_1xG
from precision_engine.policy.model import NumericsSpec
from precision_engine.rewrite import invalidate_weight_caches

from helpers import sqnr_db

JETRL = LinearSpec(weight=P["fp8_block_weight"], input=P["fp8_group_act"], grad_output=P["fp8_group_act"],
                   wgrad_operands=P["fp8_group_tokens"])
EXACT = dataclasses.replace(JETRL, kernel=Kernel.REFERENCE)
ROLLOUT_ONLY = LinearSpec(weight=P["fp8_block_weight"], input=P["fp8_group_act"])
QKV = (256, 128, 128)  # rows of q, k, v (whole 128-row blocks), in_features 256


def _parts(spec=JETRL, rows=QKV, in_f=256, bias=True, seed=0, numerics=None):
    torch.manual_seed(seed)
    return [Fp8Linear.from_linear(nn.Linear(in_f, n, bias=bias, dtype=torch.bfloat16), spec, numerics=numerics)
            for n in rows]


def _run(parts, x, dys, *, grouped, x_quantized=None):
    """(outputs, dx, dWs, dbs) of one forward and backward, grouped or one module at a time."""
    x = x.detach().clone().requires_grad_()
    if grouped:
        ys = fp8_linear_group(parts, x, x_quantized=x_quantized)
    else:
        ys = [p(x, x_quantized=x_quantized) for p in parts]
    sum((y.float() * dy.float()).sum() for y, dy in zip(ys, dys)).backward()
    out = ([y.detach() for y in ys], x.grad, [p.weight.grad for p in parts],
           [p.bias.grad if p.bias is not None else None for p in parts])
    for p in parts:
        p.weight.grad = None
        if p.bias is not None:
            p.bias.grad = None
    return out


def _inputs(parts, shape, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g).to(torch.bfloat16)
    dys = [torch.randn(*shape[:-1], p.out_features, generator=g).to(torch.bfloat16) for p in parts]
    return x, dys


def _bits(t):
    return t.contiguous().view(torch.int16)


def _ulps(got, ref64):
    """|got - ref| in units of the BF16 ulp of ref (8 significant bits)."""
    ulp = torch.exp2(torch.floor(torch.log2(ref64.abs().clamp(min=2.0**-100))) - 7)
    return ((got.double() - ref64).abs() / ulp).max().item()


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(64, 256), (3, 37, 256), (1, 256)])  # leading dims, M not a multiple of 128
def test_forward_equals_separate_modules_bitwise(shape, bias):
    parts = _parts(bias=bias)
    x, _ = _inputs(parts, shape)
    assert shares_one_gemm(parts)
    with torch.no_grad():
        grouped = fp8_linear_group(parts, x)
        for y, part in zip(grouped, parts):
            assert y.shape == (*shape[:-1], part.out_features) and y.dtype == torch.bfloat16
            assert torch.equal(_bits(y), _bits(part(x)))


def test_rows_batch_invariant():
    parts = _parts()
    x, _ = _inputs(parts, (128, 256))
    with torch.no_grad():
        full = fp8_linear_group(parts, x)
        for m in (1, 7):
            for y_m, y_full in zip(fp8_linear_group(parts, x[:m]), full):
                assert torch.equal(_bits(y_m), _bits(y_full[:m]))


@pytest.mark.parametrize("spec", [EXACT, JETRL], ids=["reference", "auto"])
def test_backward_against_float64_and_separate(spec):
    parts = _parts(spec)
    x, dys = _inputs(parts, (3, 37, 256))
    ys, dx, dws, dbs = _run(parts, x, dys, grouped=True)
    _, dx_sep, dws_sep, dbs_sep = _run(parts, x, dys, grouped=False)

    dy = torch.cat(dys, -1).reshape(-1, sum(QKV))
    w = torch.cat([p.weight.detach() for p in parts])
    dataflow = dequantize(quantize_rows_1xG(dy, spec.grad_output), torch.float64) @ dequantize(
        quantize_blocks(w, spec.weight), torch.float64)
    if spec.kernel is Kernel.REFERENCE:
        assert _ulps(dx.reshape(-1, 256), dataflow) <= 0.5 + 1e-3
    assert (dx.reshape(-1, 256).double() - dataflow).norm() / dataflow.norm() <= 2.0**-9
    assert (dx.double() - dx_sep.double()).norm() / dx.double().norm() <= 2.0**-8
    exact = dy.double() @ w.double()
    assert sqnr_db(exact, dx.reshape(-1, 256)) >= max(20.0, sqnr_db(exact, dx_sep.reshape(-1, 256)) - 0.1)

    x64 = x.double().reshape(-1, 256)
    for part, dw, dw_sep, db, db_sep, dy_part in zip(parts, dws, dws_sep, dbs, dbs_sep, dys):
        assert dw.shape == part.weight.shape and dw.dtype == part.weight.dtype
        assert sqnr_db(dy_part.double().reshape(-1, part.out_features).t() @ x64, dw) >= 20
        if spec.kernel is Kernel.REFERENCE:
            assert torch.equal(_bits(dw), _bits(dw_sep))
        else:
            torch.testing.assert_close(dw, dw_sep, rtol=2.0**-7, atol=0)
        assert torch.equal(db, db_sep)


def test_rollout_only_spec_backward_in_bf16():
    """grad_output/wgrad_operands unset: the straight-through BF16 backward against the stacked master weights."""
    parts = _parts(ROLLOUT_ONLY)
    x, dys = _inputs(parts, (2, 40, 256))
    _, dx, dws, _ = _run(parts, x, dys, grouped=True)
    _, dx_sep, dws_sep, _ = _run(parts, x, dys, grouped=False)
    assert sqnr_db(dx_sep, dx) >= 40
    for dw, dw_sep in zip(dws, dws_sep):
        assert torch.equal(dw, dw_sep)  # one BF16 GEMM over the stacked rows: each row's own dot products


def test_x_quantized_gives_the_same_outputs_and_grads():
    """What a fused norm -> quant kernel hands over: Q(x) exactly as the forward computes it."""
    parts = _parts()
    x, dys = _inputs(parts, (3, 37, 256))
    xq = quantize_rows_1xG(x.reshape(-1, 256), JETRL.input)
    for grouped in (True, False):
        own = _run(parts, x, dys, grouped=grouped)
        handed = _run(parts, x, dys, grouped=grouped, x_quantized=xq)
        for a, b in zip([*own[0], own[1], *own[2], *own[3]], [*handed[0], handed[1], *handed[2], *handed[3]]):
            assert torch.equal(_bits(a), _bits(b))


def test_x_quantized_that_does_not_fit_is_refused():
    parts = _parts()
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    with pytest.raises(OperandError, match="x_quantized"):
        parts[0](x, x_quantized=quantize_rows_1xG(x[:3], JETRL.input))
    with pytest.raises(OperandError, match="x_quantized"):
        fp8_linear_group(parts, x, x_quantized=quantize_blocks(x, JETRL.weight))


def test_stacked_weight_is_cached_per_version_and_shared_with_the_parts():
    parts = _parts()
    x = torch.randn(8, 256, dtype=torch.bfloat16)
    fp8_linear_group(parts, x)
    stacked = parts[0]._group_cache[1]
    fp8_linear_group(parts, x)
    assert parts[0]._group_cache[1] is stacked  # rollout: no re-stacking per call
    storage = stacked.data.untyped_storage().data_ptr()
    for part in parts:  # each part's Q(W) is its rows of the stack: the bytes exist once
        wq = part.quantized_weight()
        assert wq.data.untyped_storage().data_ptr() == storage
        data, scale = to_block_fp8(part.weight.detach())
        assert torch.equal(wq.data.view(torch.uint8), data.view(torch.uint8)) and torch.equal(wq.scale, scale)

    with torch.no_grad():
        parts[1].weight.mul_(2)  # a visible new version of one part
    fp8_linear_group(parts, x)
    assert parts[0]._group_cache[1] is not stacked
    assert torch.equal(parts[0]._group_cache[1].data[256:384].view(torch.uint8),
                       to_block_fp8(parts[1].weight.detach())[0].view(torch.uint8))

    restacked = parts[0]._group_cache[1]
    for p in parts:
        p.weight.grad = torch.randn_like(p.weight)
    torch.optim.AdamW([p.weight for p in parts], lr=0.1, fused=True).step()  # seen: the step counts itself
    fp8_linear_group(parts, x)
    assert parts[0]._group_cache[1] is not restacked
    restacked = parts[0]._group_cache[1]
    with torch.no_grad():
        parts[2].weight.data.mul_(2)  # through .data: invisible, so the owner invalidates
    fp8_linear_group(parts, x)
    assert parts[0]._group_cache[1] is restacked
    model = nn.ModuleList(parts)
    assert invalidate_weight_caches(model) == 3
    fresh = fp8_linear_group(parts, x)
    stack = parts[0]._group_cache[1]
    assert stack is not restacked
    expected = to_block_fp8(torch.cat([p.weight.detach() for p in parts]))
    assert torch.equal(stack.data.view(torch.uint8), expected[0].view(torch.uint8))
    assert torch.equal(stack.scale, expected[1])
    with torch.no_grad():
        for y, part in zip(fresh, parts):
            assert torch.equal(_bits(y), _bits(part(x)))


def test_loaded_bytes_are_the_bytes_multiplied():
    """Weights installed pre-quantized (weight sync) are pinned per part; the stack takes them as they are."""
    parts = _parts()
    donor = _parts(seed=7)
    for part, other in zip(parts, donor):
        part.load_quantized(*to_block_fp8(other.weight.detach()))
    x = torch.randn(8, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        separate = [part(x) for part in parts]  # each with its pinned bytes
        grouped = fp8_linear_group(parts, x)
    for y, y_sep, part, other in zip(grouped, separate, parts, donor):
        assert torch.equal(_bits(y), _bits(y_sep))
        assert torch.equal(part.quantized_weight().data.view(torch.uint8),
                           other.quantized_weight().data.view(torch.uint8))


@pytest.mark.parametrize("pinned", [False, True], ids=["quantized", "loaded"])
def test_training_stacks_q_w_transposed_in_the_same_pass(monkeypatch, pinned):
    """A training forward builds the stacked Q(W)^T for dgrad while it quantizes each part into the stack: no
    transpose pass, and the bytes a transpose of the stacked Q(W) gives. Parts whose bytes were loaded
    pre-quantized (copied into the stack, not re-quantized) land in it transposed too."""
    from precision_engine.numerics import fused_linear as F
    from precision_engine.numerics.gemm import transpose_operand

    parts = _parts()
    if pinned:
        for part, other in zip(parts, _parts(seed=7)):
            part.load_quantized(*to_block_fp8(other.weight.detach()))
    monkeypatch.setattr(F, "transpose_operand", lambda q: pytest.fail("Q(W)^T came from a second pass"))
    x = torch.randn(8, 256, dtype=torch.bfloat16, requires_grad=True)
    sum(y.float().sum() for y in fp8_linear_group(parts, x)).backward()
    _, stack, stack_t = parts[0]._group_cache
    ref = transpose_operand(stack)
    assert torch.equal(stack_t.data.view(torch.uint8), ref.data.view(torch.uint8))
    assert torch.equal(stack_t.scale, ref.scale)
    assert stack_t.data.is_contiguous() and stack_t.scale.is_contiguous()


def test_a_captured_q_w_refreshed_in_place_updates_the_stack():
    """The decode CUDA graph reads the stack by address and refreshes by copying a new version into the part's
    Q(W) it captured (rl.decode.DecodeGraph.refresh): those copies must land in the stack it reads."""
    parts = _parts()
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        fp8_linear_group(parts, x)
        read_by_graph = parts[0]._group_cache[1]
        captured = [p.quantized_weight() for p in parts]
        for p in parts:
            p.weight.add_(torch.randn_like(p.weight) * 0.01)
        invalidate_weight_caches(nn.ModuleList(parts))
        for p, q in zip(parts, captured):
            current = p.quantized_weight()
            q.data.copy_(current.data)
            q.scale.copy_(current.scale)
    expected = to_block_fp8(torch.cat([p.weight.detach() for p in parts]))
    assert torch.equal(read_by_graph.data.view(torch.uint8), expected[0].view(torch.uint8))
    assert torch.equal(read_by_graph.scale, expected[1])


def test_state_dict_and_parameters_are_untouched():
    parts = _parts()
    model = nn.ModuleList(parts)
    before = (list(model.state_dict()), [n for n, _ in model.named_parameters()], list(model.named_modules()))
    _run(parts, *_inputs(parts, (8, 256)), grouped=True)
    assert (list(model.state_dict()), [n for n, _ in model.named_parameters()], list(model.named_modules())) == before
    assert all(p.weight.grad is None for p in parts)  # _run cleared them after checking


@pytest.mark.parametrize("why", ["rows", "spec", "numerics", "bias", "in_features", "hook", "same module"])
def test_parts_that_cannot_share_a_gemm_run_their_own_forward(why):
    parts = _parts()
    if why == "rows":  # 192 rows: a 128-row block would straddle k and v
        parts[1] = _parts(rows=(192,))[0]
    elif why == "spec":
        parts[1] = _parts(ROLLOUT_ONLY)[1]
    elif why == "numerics":
        parts[1] = _parts(numerics=NumericsSpec(batch_invariant=False))[1]
    elif why == "bias":
        parts[1] = _parts(bias=False)[1]
    elif why == "in_features":
        parts[1] = _parts(in_f=384, rows=(128,))[0]
    elif why == "same module":
        parts[2] = parts[1]
    calls = []
    if why == "hook":  # FSDP2's unshard and verify's layer recorder hook a module's own call
        parts[1].register_forward_hook(lambda *_: calls.append(1))
    assert not shares_one_gemm(parts)
    xs = [torch.randn(5, p.in_features, dtype=torch.bfloat16) for p in parts]
    if why == "in_features":
        return  # one input cannot feed both; shares_one_gemm is what the decoder asks
    with torch.no_grad():
        grouped = fp8_linear_group(parts, xs[0])
        for y, part in zip(grouped, parts):
            assert torch.equal(_bits(y), _bits(part(xs[0])))
    assert parts[0]._group_cache is None
    assert calls == ([1, 1] if why == "hook" else [])


def test_only_fp8_linears_are_grouped():
    parts = _parts()
    parts[2] = parts[2].to_linear()
    assert not shares_one_gemm(parts)
    with pytest.raises(OperandError, match="Fp8Linear parts"):
        fp8_linear_group(parts, torch.randn(2, 256, dtype=torch.bfloat16))


def test_double_backward_is_refused():
    parts = _parts()
    x = torch.randn(8, 256, dtype=torch.bfloat16, requires_grad=True)
    ys = fp8_linear_group(parts, x)
    (dx,) = torch.autograd.grad(sum(y.float().sum() for y in ys), x, create_graph=True)
    with pytest.raises(UnsupportedError, match="differentiate twice"):
        (dx.float().pow(2).sum()).backward()


def test_training_after_inference_mode_rollout():
    """Rollout under inference_mode builds the stack; the training step saves it for backward."""
    parts = _parts()
    x = torch.randn(8, 256, dtype=torch.bfloat16)
    with torch.inference_mode():
        rollout = fp8_linear_group(parts, x)
    ys = fp8_linear_group(parts, x.clone().requires_grad_())
    sum(y.float().sum() for y in ys).backward()
    assert all(torch.equal(y.detach(), r) for y, r in zip(ys, rollout))
    assert all(p.weight.grad is not None for p in parts)


def test_torch_compile_matches_eager_bitwise():
    """Compiled in one graph (weights quantized inside it), forward and gradients equal eager's. About 3 s."""
    torch._dynamo.reset()
    parts = _parts(rows=(128, 128))
    x, dys = _inputs(parts, (4, 256))

    def step(inp):
        return sum((y.float() * dy.float()).sum() for y, dy in zip(fp8_linear_group(parts, inp), dys))

    eager_x = x.clone().requires_grad_()
    step(eager_x).backward()
    eager = [eager_x.grad] + [p.grad.clone() for part in parts for p in part.parameters()]
    for part in parts:
        part.zero_grad()
    compiled_x = x.clone().requires_grad_()
    torch.compile(step, backend="aot_eager", fullgraph=True)(compiled_x).backward()
    compiled = [compiled_x.grad] + [p.grad for part in parts for p in part.parameters()]
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_group_rows_batch_invariant_and_close_to_separate():
    """Llama-8B q/k/v on the H200's Triton path: each part's rows equal the 4096-token forward's at decode
    sizes; the grouped split-K (N = 6144) need not give the separate calls' bits, only their values."""
    torch.manual_seed(0)
    parts = [Fp8Linear.from_linear(nn.Linear(4096, n, bias=False, device="cuda", dtype=torch.bfloat16), JETRL,
                                   numerics=NumericsSpec(batch_invariant=True)) for n in (4096, 1024, 1024)]
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        full = fp8_linear_group(parts, x)
        for m in (1, 7, 128):
            for y_m, y_full in zip(fp8_linear_group(parts, x[:m]), full):
                assert torch.equal(_bits(y_m), _bits(y_full[:m])), m
        for y, part in zip(full, parts):
            assert sqnr_db(part(x), y) >= 40
