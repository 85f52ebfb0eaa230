"""Fp8Linear on the CPU (reference GEMM): parameters shared, gradients close to BF16, FP8 saved activations,
weight cache per version, and a small MLP trained with FP8 reaching the BF16 loss.

Floors (blockwise FP8, as torchao's blockwise tests use 25-30 dB): output SQNR >= 25 dB, input and weight
gradients >= 20 dB, cosine similarity >= 0.99 for all three, against nn.Linear on the same BF16 data.
"""

import math
from dataclasses import replace

import pytest
import torch
from torch import nn

from precision_engine.errors import NonFiniteError, OperandError, UnsupportedError
from precision_engine.numerics.exchange import to_block_fp8
from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics.formats import DType, LinearSpec
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.policy.model import NonFinite, NumericsSpec

from helpers import sqnr_db

JETRL = LinearSpec(weight=P["fp8_block_weight"], input=P["fp8_group_act"], grad_output=P["fp8_group_act"],
                   wgrad_operands=P["fp8_group_tokens"])
ROLLOUT_ONLY = LinearSpec(weight=P["fp8_block_weight"], input=P["fp8_group_act"])
WGRAD_BLOCKS = replace(JETRL, wgrad_input=P["fp8_block_weight"])  # x^T in 128x128 blocks: the fprop's GEMM form


def _cos(out, ref):
    return torch.nn.functional.cosine_similarity(out.double().flatten(), ref.double().flatten(), dim=0).item()


def _pair(spec, in_f=256, out_f=384, bias=True, seed=0):
    torch.manual_seed(seed)
    lin = nn.Linear(in_f, out_f, bias=bias, dtype=torch.bfloat16)
    return lin, Fp8Linear.from_linear(lin, spec)


def _grads(layer, x, dy):
    x = x.detach().clone().requires_grad_()
    y = layer(x)
    y.backward(dy)
    grads = (y.detach(), x.grad, layer.weight.grad.clone(), layer.bias.grad.clone() if layer.bias is not None else None)
    layer.weight.grad = None
    if layer.bias is not None:
        layer.bias.grad = None
    return grads


def test_shares_parameters_and_state_dict():
    lin, fp8 = _pair(JETRL)
    assert fp8.weight is lin.weight and fp8.bias is lin.bias
    assert list(fp8.state_dict()) == list(lin.state_dict()) == ["weight", "bias"]
    back = fp8.to_linear()
    assert back.weight is lin.weight and back.bias is lin.bias and isinstance(back, nn.Linear)


@pytest.mark.parametrize("shape", [(64, 256), (3, 37, 256)])  # leading dims, a token count not a multiple of 128
def test_gradients_close_to_bf16(shape):
    lin, fp8 = _pair(JETRL)
    x = torch.randn(*shape, dtype=torch.bfloat16)
    dy = torch.randn(*shape[:-1], 384, dtype=torch.bfloat16)
    y, dx, dw, db = _grads(fp8, x, dy)
    y_ref, dx_ref, dw_ref, db_ref = _grads(lin, x, dy)
    assert y.shape == y_ref.shape and dx.shape == x.shape
    assert y.dtype == dx.dtype == dw.dtype == torch.bfloat16
    for out, ref, floor in ((y, y_ref, 25), (dx, dx_ref, 20), (dw, dw_ref, 20)):
        assert sqnr_db(ref, out) >= floor
        assert _cos(out, ref) >= 0.99
    assert sqnr_db(db_ref, db) >= 40  # the bias grad is a plain fp32 sum of dy


@pytest.mark.parametrize("tokens", [256, 200])  # 200: the token columns padded to whole blocks
def test_wgrad_input_in_blocks_matches_float64(tokens):
    """x^T in 128x128 blocks changes dW only: y and dx keep their bits, and dW against float64 (dy^T x) stays
    within 6e-2 norm-relative (FP8 E4M3's rounding of both operands; measured 4.4-4.5e-2), no more than 5%
    above the 128x1 form's error on the same data."""
    _, ours = _pair(WGRAD_BLOCKS, bias=False, seed=tokens)
    _, jetrl = _pair(JETRL, bias=False, seed=tokens)
    x = torch.randn(tokens, 256, dtype=torch.bfloat16)
    dy = torch.randn(tokens, 384, dtype=torch.bfloat16)
    y, dx, dw, _ = _grads(ours, x, dy)
    y_j, dx_j, dw_j, _ = _grads(jetrl, x, dy)
    assert torch.equal(y, y_j) and torch.equal(dx, dx_j)
    ref = dy.double().t() @ x.double()
    err, err_j = ((d.double() - ref).norm() / ref.norm() for d in (dw, dw_j))
    assert err < 6e-2 and err < 1.05 * err_j, (err, err_j)
    assert not torch.equal(dw, dw_j)
    assert "wgrad_x=e4m3 128x128" in repr(ours)


def test_rollout_only_spec_runs_backward_in_bf16():
    """grad_output/wgrad_operands unset: dgrad and wgrad are the BF16 GEMMs against the master weight."""
    lin, fp8 = _pair(ROLLOUT_ONLY)
    x = torch.randn(64, 256, dtype=torch.bfloat16)
    dy = torch.randn(64, 384, dtype=torch.bfloat16)
    _, dx, dw, _ = _grads(fp8, x, dy)
    _, dx_ref, dw_ref, _ = _grads(lin, x, dy)
    assert sqnr_db(dx_ref, dx) >= 40 and sqnr_db(dw_ref, dw) >= 40


def _saved_dtypes(layer, x):
    saved = []

    def pack(t):
        saved.append((t.dtype, t.numel()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x)
    return saved


def test_saves_fp8_activation_not_bf16():
    _, fp8 = _pair(JETRL, bias=False)
    x = torch.randn(64, 256, dtype=torch.bfloat16, requires_grad=True)
    saved = _saved_dtypes(fp8, x)
    assert (torch.float8_e4m3fn, x.numel()) in saved
    assert all(not (dt == torch.bfloat16 and n == x.numel()) for dt, n in saved)
    _, bf16_wgrad = _pair(ROLLOUT_ONLY, bias=False)
    assert (torch.bfloat16, x.numel()) in _saved_dtypes(bf16_wgrad, x)


def test_weight_cache_follows_weight_version():
    lin, fp8 = _pair(JETRL)
    w1 = fp8.quantized_weight()
    assert fp8.quantized_weight() is w1  # rollout: no re-quantization per call
    data, scale = to_block_fp8(lin.weight.detach())
    assert torch.equal(w1.data.view(torch.uint8), data.view(torch.uint8)) and torch.equal(w1.scale, scale)

    opt = torch.optim.SGD(lin.parameters(), lr=0.1)  # writes through autograd: the version counter moves
    fp8(torch.randn(8, 256, dtype=torch.bfloat16)).float().sum().backward()
    opt.step()
    w2 = fp8.quantized_weight()
    assert w2 is not w1
    assert torch.equal(w2.data.view(torch.uint8), to_block_fp8(lin.weight.detach())[0].view(torch.uint8))
    assert fp8.quantized_weight() is w2


def test_a_new_weight_at_the_old_ones_address_and_version_is_quantized_anew():
    """A new Parameter can start at the address the allocator took back from the old one and at its version
    count (both start at 0): (version, address) alone kept the stale Q(W) then. Made deterministic here: the new
    tensor is built over the old one's storage and its version counter brought level."""
    torch.manual_seed(0)
    fp8 = Fp8Linear(256, 256, JETRL, dtype=torch.bfloat16)
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    old = fp8.weight
    new = torch.empty(0, dtype=old.dtype).set_(old.untyped_storage(), 0, old.shape, old.stride())
    with torch.no_grad():
        while old._version < new._version + 1:  # the copy_ below moves new's counter by one
            old.add_(0)
        fp8(x)  # Q(W) of old's values, at old's version
        new.copy_(torch.randn_like(new))
    fp8.weight = nn.Parameter(new)
    assert (fp8.weight._version, fp8.weight.data_ptr()) == (old._version, old.data_ptr())
    assert torch.equal(fp8.quantized_weight().data.view(torch.uint8),
                       to_block_fp8(fp8.weight.detach())[0].view(torch.uint8))


def test_the_bias_gradient_is_summed_in_fp32_and_kept_in_the_biass_dtype():
    """An fp32 bias beside a bf16 weight (compute fp32): db was cast to the weight's bf16 and back, 0.013 off."""
    torch.manual_seed(0)
    fp8 = Fp8Linear(256, 200, replace(JETRL, compute=DType.FP32), dtype=torch.bfloat16)
    fp8.bias = nn.Parameter(torch.randn(200) * 1e-3)
    dy = torch.randn(5, 200) * 1.001
    fp8(torch.randn(5, 256, requires_grad=True)).backward(dy)
    assert fp8.bias.grad.dtype == torch.float32
    assert torch.equal(fp8.bias.grad, dy.sum(0, dtype=torch.float32))


def test_a_used_layer_pickles_and_copies_without_its_cached_fp8_bytes():
    import copy
    import pickle

    _, fp8 = _pair(JETRL)
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    y = fp8(x)  # fills the Q(W) cache with FP8 tensors, which torch cannot pickle
    for clone in (pickle.loads(pickle.dumps(fp8)), copy.deepcopy(fp8)):
        assert torch.equal(clone(x), y)


def test_training_step_quantizes_w_and_w_transposed_in_one_pass(monkeypatch):
    """A training forward on a new weight version gets Q(W) and dgrad's Q(W)^T from one quantizer call (no
    transpose pass), with the bytes a transpose of Q(W) gives; the next step on the same version reuses both."""
    from precision_engine.numerics import linear as L
    from precision_engine.numerics.gemm import transpose_operand

    lin, fp8 = _pair(JETRL, bias=False)
    with torch.no_grad():
        lin.weight.mul_(torch.exp(torch.randn(384, 1) * 2).to(torch.bfloat16))  # block scales spanning decades
    monkeypatch.setattr(L, "transpose_operand", lambda q: pytest.fail("Q(W)^T came from a second pass"))
    x = torch.randn(8, 256, dtype=torch.bfloat16, requires_grad=True)
    fp8(x).float().sum().backward()
    wq, (key, wt) = fp8.quantized_weight(), fp8._wt_cache
    assert key is wq.data
    ref = transpose_operand(wq)
    assert torch.equal(wt.data.view(torch.uint8), ref.data.view(torch.uint8)) and torch.equal(wt.scale, ref.scale)
    assert wt.data.is_contiguous() and wt.scale.is_contiguous()
    fp8(x).float().sum().backward()  # the same weight version: nothing re-quantized
    assert fp8.quantized_weight() is wq and fp8._wt_cache[1] is wt


@pytest.mark.parametrize("optimizer", [lambda p: torch.optim.AdamW(p, lr=0.1, fused=True),
                                       lambda p: torch.optim.SGD(p, lr=0.1, fused=True)])
def test_a_fused_optimizer_step_is_seen_and_another_models_cache_stays(optimizer):
    """Fused kernels write the weight without bumping its version counter: the step counts itself on the
    weights it holds (a torch.optim post-step hook), so the next forward re-quantizes, bitwise as a fresh layer
    would, and a layer whose weights the optimizer does not hold keeps its Q(W)."""
    lin, fp8 = _pair(JETRL)
    _, other = _pair(JETRL, seed=1)
    other_w = other.quantized_weight()
    x = torch.randn(8, 256, dtype=torch.bfloat16)
    stale = fp8.quantized_weight()
    fp8(x).float().sum().backward()
    optimizer(lin.parameters()).step()
    fresh = fp8.quantized_weight()
    assert fresh is not stale
    assert torch.equal(fresh.data.view(torch.uint8), to_block_fp8(lin.weight.detach())[0].view(torch.uint8))
    twin = nn.Linear(256, 384, dtype=torch.bfloat16)
    twin.load_state_dict(lin.state_dict())
    assert torch.equal(fp8(x), Fp8Linear.from_linear(twin, JETRL)(x))
    assert other.quantized_weight() is other_w
    with torch.no_grad():
        lin.weight.data.mul_(2)  # through .data: unseen, so the owner's call stays the rule
    assert fp8.quantized_weight() is fresh
    fp8.invalidate_weight_cache()
    assert torch.equal(fp8.quantized_weight().data.view(torch.uint8),
                       to_block_fp8(lin.weight.detach())[0].view(torch.uint8))


def test_is_an_nn_linear():
    """FSDP wrap policies, PEFT and verl's loaders test isinstance(m, nn.Linear)."""
    lin, fp8 = _pair(JETRL)
    assert isinstance(fp8, nn.Linear) and isinstance(Fp8Linear(256, 128, JETRL, device="meta"), nn.Linear)
    assert "in_features=256, out_features=384, bias=True" in repr(fp8)


@pytest.mark.parametrize("spec", [JETRL, WGRAD_BLOCKS], ids=["jetrl", "wgrad-blocks"])
def test_torch_compile_forward_and_backward_without_graph_breaks(spec):
    """The CPU reference path compiles into one graph per pass (dynamo's explain reports no break), and the
    compiled forward and gradients equal eager's bitwise. Takes about 10-20 s a spec on 2 CPU cores."""
    torch._dynamo.reset()
    lin, fp8 = _pair(spec, in_f=256, out_f=128)
    model = nn.Sequential(fp8, nn.GELU(), Fp8Linear.from_linear(nn.Linear(128, 256, dtype=torch.bfloat16), spec))
    x = torch.randn(4, 256, dtype=torch.bfloat16)

    def step(inp):
        return model(inp).float().square().sum()

    explanation = torch._dynamo.explain(step)(x.clone().requires_grad_())
    assert explanation.graph_break_count == 0, explanation.break_reasons
    eager_x = x.clone().requires_grad_()
    step(eager_x).backward()
    eager = [eager_x.grad] + [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled_x = x.clone().requires_grad_()
    torch.compile(step, backend="aot_eager", fullgraph=True)(compiled_x).backward()
    compiled = [compiled_x.grad] + [p.grad for p in model.parameters()]
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


def test_rows_bitwise_batch_invariant():
    _, fp8 = _pair(JETRL)
    x = torch.randn(128, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        full = fp8(x)
        for m in (1, 7):
            assert torch.equal(fp8(x[:m]).view(torch.uint16), full[:m].view(torch.uint16))


def test_nonfinite_policy_error_raises():
    torch.manual_seed(0)
    lin = nn.Linear(256, 128, dtype=torch.bfloat16)
    fp8 = Fp8Linear.from_linear(lin, JETRL, numerics=NumericsSpec(nonfinite=NonFinite.ERROR))
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    x[1, 3] = math.inf
    with pytest.raises(NonFiniteError):
        fp8(x)
    propagate = Fp8Linear.from_linear(lin, JETRL)
    assert torch.isnan(propagate(x)[1]).all()


def test_refuses_specs_it_cannot_run():
    with pytest.raises(UnsupportedError, match="FP8 weight and input"):
        Fp8Linear(256, 128, LinearSpec(weight=P["bf16"], input=P["fp8_group_act"]))
    with pytest.raises(UnsupportedError, match="128x128 blocks"):
        Fp8Linear(256, 128, LinearSpec(weight=P["fp8_channel"], input=P["fp8_group_act"]))
    with pytest.raises(UnsupportedError, match="wgrad_operands in 128x1 groups along tokens"):
        Fp8Linear(256, 128, LinearSpec(weight=P["fp8_block_weight"], input=P["fp8_group_act"],
                                       grad_output=P["fp8_group_act"], wgrad_operands=P["fp8_group_act"]))


def _train_mlp(make_linear, steps=300, seed=0):
    """A 2-layer MLP regressing a fixed random teacher; returns the mean loss over the last 20 steps."""
    torch.manual_seed(seed)
    teacher = nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 128))
    student = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 128)).to(torch.bfloat16)
    student[0], student[2] = make_linear(student[0]), make_linear(student[2])
    opt = torch.optim.Adam(student.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(seed + 1)
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 256, generator=g)
        with torch.no_grad():
            target = teacher(x)
        loss = (student(x.to(torch.bfloat16)).float() - target).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return sum(losses[-20:]) / 20, losses[0]


def test_mlp_training_reaches_bf16_loss():
    """300 Adam steps: the FP8 run lands within 10% (relative) of the BF16 run's final loss."""
    bf16_loss, start = _train_mlp(lambda lin: lin)
    fp8_loss, _ = _train_mlp(lambda lin: Fp8Linear.from_linear(lin, JETRL))
    assert bf16_loss < 0.3 * start  # the task is learnt at all
    assert fp8_loss <= 1.10 * bf16_loss, (fp8_loss, bf16_loss)


def test_output_takes_the_input_dtype_like_nn_linear():
    """FP32 activations (an FP32 model without autocast) get the same BF16-computed values, upcast exactly."""
    torch.manual_seed(3)
    lin = nn.Linear(256, 128, dtype=torch.float32)
    fp8 = Fp8Linear.from_linear(lin, JETRL)
    x32 = torch.randn(5, 256).to(torch.bfloat16).float()  # representable in BF16: the same quantized input
    y32 = fp8(x32.requires_grad_())
    y16 = fp8(x32.detach().to(torch.bfloat16))
    assert y32.dtype == torch.float32 and y16.dtype == torch.bfloat16
    assert torch.equal(y32.detach().to(torch.bfloat16), y16)
    y32.float().pow(2).sum().backward()
    assert x32.grad.dtype == torch.float32 and lin.weight.grad.dtype == torch.float32


@pytest.mark.parametrize("spec", [JETRL, ROLLOUT_ONLY], ids=["jetrl", "rollout-only"])
def test_double_backward_is_refused_not_silently_dropped(spec):
    """The FP8 backward is not differentiable: a gradient penalty through it must raise, not lose its term."""
    _, fp8 = _pair(spec)
    x = torch.randn(8, 256, dtype=torch.bfloat16, requires_grad=True)
    y = fp8(x)
    (dx,) = torch.autograd.grad(y.float().sum(), x, create_graph=True)
    loss = y.float().sum() + dx.float().pow(2).sum()
    with pytest.raises(UnsupportedError, match="differentiate twice"):
        loss.backward()


def test_training_after_inference_mode_rollout():
    """RL loop: rollout under torch.inference_mode() fills the weight cache, then the training step on the same
    weights saves it for backward, which inference tensors do not allow."""
    _, fp8 = _pair(JETRL)
    x = torch.randn(8, 256, dtype=torch.bfloat16)
    with torch.inference_mode():
        rollout = fp8(x)
    y = fp8(x.clone().requires_grad_())
    y.float().sum().backward()
    assert torch.equal(y.detach(), rollout) and fp8.weight.grad is not None


@pytest.mark.parametrize("x_grad", [True, False])
def test_nonfinite_dy_in_the_wgrad_quantizer_raises(x_grad):
    """grad_output unset (dgrad in bf16) but wgrad in FP8: the wgrad quantizer applies numerics.nonfinite to dy
    too (it used to give a NaN dW in silence). Also when x needs no gradient, so dgrad never runs (issue 8,
    item 3)."""
    import dataclasses

    spec = dataclasses.replace(JETRL, grad_output=None) if x_grad else JETRL
    lin = nn.Linear(256, 128, dtype=torch.bfloat16)
    fp8 = Fp8Linear.from_linear(lin, spec, numerics=NumericsSpec(nonfinite=NonFinite.ERROR))
    x = torch.randn(4, 256, dtype=torch.bfloat16, requires_grad=x_grad)
    dy = torch.randn(4, 128, dtype=torch.bfloat16)
    dy[2, 5] = math.nan
    with pytest.raises(NonFiniteError, match="grad_output"):
        fp8(x).backward(dy)


@pytest.mark.parametrize("shape", [(0, 128), (128, 0)])
def test_an_empty_linear_is_refused_at_construction(shape):
    """nn.Linear(0, n) returns zeros; an FP8 GEMM over an empty operand has no groups to scale, so say so."""
    with pytest.raises(UnsupportedError, match=r"in_features, out_features >= 1, got \(\d+, \d+\)"):
        Fp8Linear(*shape, JETRL)


@pytest.mark.parametrize("forward_autocast, backward_autocast", [(True, False), (False, True), (True, True)])
def test_autocast_changes_no_bit_of_an_fp32_linear(forward_autocast, backward_autocast):
    """The spec fixes every GEMM's dtypes: a bf16 autocast around the backward (where the CPU's emulated wgrad
    and dgrad GEMMs are fp32 matmuls, which autocast would run in bf16) leaves dx and dW as without it; around the
    forward, y comes out in bf16 as nn.Linear's would, the same values (the compute dtype is bf16 already)."""
    torch.manual_seed(11)
    module = Fp8Linear(256, 128, JETRL, dtype=torch.float32)
    x = torch.randn(64, 256, requires_grad=True)
    dy = torch.randn(64, 128)

    def step(fwd: bool, bwd: bool):
        module.zero_grad()
        x.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=fwd):
            y = module(x)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bwd):
            y.backward(dy)
        return y.detach(), x.grad.clone(), module.weight.grad.clone()

    (y, *grads), (y_under, *grads_under) = step(False, False), step(forward_autocast, backward_autocast)
    assert y_under.dtype == (torch.bfloat16 if forward_autocast else torch.float32)
    assert torch.equal(y.to(y_under.dtype), y_under)
    for plain, under in zip(grads, grads_under):
        assert under.dtype == torch.float32 and torch.equal(plain, under)


def test_a_used_layer_converts_and_loads_through_swap_tensors():
    """torch.utils.swap_tensors (nn.Module._apply for wrapper-subclass params such as DTensor, or with
    swap_module_params_on_conversion) refuses a tensor with a weak reference: the cache key held one."""
    _, fp8 = _pair(JETRL)
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    fp8(x)
    state = {k: v.clone() for k, v in fp8.state_dict().items()}
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        assert fp8.float()(x.float()).dtype == torch.float32
        fp8.bfloat16().load_state_dict(state)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    expected = to_block_fp8(state["weight"])[0]
    assert torch.equal(fp8.quantized_weight().data.view(torch.uint8), expected.view(torch.uint8))


def test_a_used_weight_saves_and_loads_weights_only(tmp_path):
    """The key's marks on the weight are numbers: torch.load's default weights_only unpickler takes them."""
    _, fp8 = _pair(JETRL)
    fp8(torch.randn(4, 256, dtype=torch.bfloat16))
    torch.save({"weight": fp8.weight}, tmp_path / "w.pt")
    assert torch.equal(torch.load(tmp_path / "w.pt")["weight"], fp8.weight)


def test_a_rollout_forward_after_a_step_lets_the_last_versions_transpose_go():
    """Q(W)^T belongs to the Q(W) it was made with: a no-grad forward on a new version drops the old one."""
    lin, fp8 = _pair(JETRL)
    x = torch.randn(8, 256, dtype=torch.bfloat16)
    fp8(x).float().sum().backward()
    torch.optim.SGD(lin.parameters(), lr=0.1).step()
    assert fp8._wt_cache is not None
    with torch.no_grad():
        fp8(x)
    assert fp8._wt_cache is None


def test_called_and_built_as_nn_linear_is():
    """`layer(input=x)` works as nn.Linear's; a 0-d input and nn.Linear's positional bias get clear errors."""
    _, fp8 = _pair(JETRL)
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    assert torch.equal(fp8(input=x), fp8(x))
    with pytest.raises(OperandError, match="0-d tensor"):
        fp8(torch.tensor(1.0, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="spec must be a LinearSpec, got bool"):
        Fp8Linear(256, 384, True)
