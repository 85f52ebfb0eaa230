"""The decoder makes its FP8 linears' 1x128 input quantization inside the op before them (numerics.fused_quant).

In batch-invariant mode (and in a fast rollout forward on the GPU), RMSNorm -> q/k/v, RMSNorm -> gate/up and SiLU(gate) * up -> down_proj run
`rms_norm_quantize` / `silu_mul_quantize` and hand the Quantized to the linears, when every reader is an
Fp8Linear of one input format. The fused producers are bitwise the unfused ops and their quantization, and
differentiate as the unfused ops, so logits and every gradient equal the unfused path's bit for bit (on the CPU
they compose the unfused ops; the H200 tests of numerics.fused_quant pin the kernels to the same bits). The
unfused reference here is the same model with `_Ops.fused_input` forced to None. About 0.3 s per case on one core.
"""

from dataclasses import replace

import pytest
import torch

import precision_engine.models.decoder as decoder_module
import precision_engine.numerics.linear as linear_module
from precision_engine.compile import compile_plan
from precision_engine.models import load_inventory
from precision_engine.models.decoder import Decoder, calibrate_kv_scales
from precision_engine.numerics.formats import ScaleKind
from precision_engine.policy import load_policy
from precision_engine.rewrite import apply

from test_decoder_fused import _ids, _logits_and_grads


def _model(policy_name: str, name: str, phase: str, *, batch_invariant: bool = True) -> Decoder:
    """`name` rewritten for `phase` of the shipped policy, with the rollout's KV scales where it has an FP8 cache
    (jetrl_unified_kv unifies the phases: the training forward rounds k/v with them)."""
    policy = load_policy(f"policies/{policy_name}.yaml")
    model = Decoder.from_config(name, seed=0, dtype="bf16", batch_invariant=batch_invariant)
    apply(compile_plan(policy, load_inventory(name)), model, phase)
    if policy.kv_cache.is_fp8:
        model.kv_scales = calibrate_kv_scales(model, *_ids(), mode=policy.kv_cache.scale)
    return model.train(phase == "train")


def _run(model: Decoder, phase: str):
    """(logits, grads) of the training step, or (logits, {}) of a rollout forward under inference_mode."""
    ids, mask = _ids()
    if phase == "train":
        return _logits_and_grads(model, ids, mask)
    with torch.inference_mode():
        return model(ids, mask), {}


def _count_producers(monkeypatch) -> dict[str, int]:
    """Calls of each fused producer; the SwiGLU product counts once whether it reads gate and up as a pair or
    packed side by side (a fused gate/up GEMM's output)."""
    calls = {"rms_norm_quantize": 0, "silu_mul_quantize": 0}
    for name in (*calls, "silu_mul_quantize_packed"):
        real = getattr(decoder_module, name)

        def counting(*args, _name=name.removesuffix("_packed"), _real=real, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(decoder_module, name, counting)
    return calls


def _assert_fused_equals_unfused(model: Decoder, phase: str, monkeypatch) -> dict[str, int]:
    """Run fused, then unfused (`fused_input` forced off); logits and grads bitwise equal. Returns the fused
    run's producer calls."""
    calls = _count_producers(monkeypatch)
    logits, grads = _run(model, phase)
    fused_calls = dict(calls)
    with monkeypatch.context() as patch:
        patch.setattr(decoder_module._Ops, "fused_input", lambda self, readers, x: None)
        ref_logits, ref_grads = _run(model, phase)
    assert dict(calls) == fused_calls  # the reference ran no fused producer
    assert torch.equal(logits.view(torch.int16), ref_logits.view(torch.int16))
    assert grads.keys() == ref_grads.keys()
    for key, grad in grads.items():
        assert torch.equal(grad.view(torch.int16), ref_grads[key].view(torch.int16)), key
    return fused_calls


@pytest.mark.parametrize("phase", ["train", "rollout"])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
@pytest.mark.parametrize("policy_name", ["bf16_baseline", "jetrl_unified", "jetrl_unified_kv"])
def test_fused_quant_keeps_the_unfused_bits(policy_name, name, phase, monkeypatch):
    """FP8 policies fuse both norms and the SwiGLU product of every layer; BF16 linears leave every op unfused."""
    model = _model(policy_name, name, phase)
    calls = _assert_fused_equals_unfused(model, phase, monkeypatch)
    layers = model.config.num_layers
    fp8 = policy_name != "bf16_baseline"
    assert calls == {"rms_norm_quantize": 2 * layers if fp8 else 0, "silu_mul_quantize": layers if fp8 else 0}
    if phase == "train" and fp8:
        assert "model.layers.0.input_layernorm.weight" in _run(model, phase)[1]  # the norm weights still learn


def test_linears_behind_fused_ops_do_not_quantize_again(monkeypatch):
    """Rollout forward of tiny-llama (2 layers): of the four FP8 input quantizations per layer (q/k/v, o,
    gate/up, down) only o_proj's, behind attention, is left to the linears."""
    model = _model("jetrl_unified", "tiny-llama", "rollout")
    calls = []
    real = linear_module.quantize_rows_1xG
    monkeypatch.setattr(linear_module, "quantize_rows_1xG", lambda x, fmt: calls.append(x.shape) or real(x, fmt))
    _run(model, "rollout")
    assert len(calls) == model.config.num_layers
    calls.clear()
    monkeypatch.setattr(decoder_module._Ops, "fused_input", lambda self, readers, x: None)
    _run(model, "rollout")
    assert len(calls) == 4 * model.config.num_layers


def test_fast_mode_fuses_only_in_gpu_rollout(monkeypatch):
    """batch_invariant off, with autograd or on the CPU: F.rms_norm and F.silu run, whose bits the fused
    producers do not promise."""
    for phase in ("train", "rollout"):
        model = _model("jetrl_unified", "tiny-llama", phase, batch_invariant=False)
        calls = _assert_fused_equals_unfused(model, phase, monkeypatch)
        assert calls == {"rms_norm_quantize": 0, "silu_mul_quantize": 0}


@pytest.mark.gpu
@pytest.mark.parametrize("policy_name", ["jetrl_unified", "jetrl_unified_kv"])
def test_fast_gpu_rollout_fuses_with_the_triton_ops_bits(policy_name, monkeypatch):
    """batch_invariant off, on the GPU without autograd (rollout): RMSNorm runs numerics.invariant's kernel
    anyway, so both norms and the SwiGLU product fuse; the logits are those of the unfused ops with that SiLU."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    policy = load_policy(f"policies/{policy_name}.yaml")
    model = Decoder.from_config("tiny-llama", seed=0, dtype="bf16", device="cuda", batch_invariant=False)
    apply(compile_plan(policy, load_inventory("tiny-llama")), model, "rollout")
    ids, mask = (t.cuda() for t in _ids())
    if policy.kv_cache.is_fp8:
        model.kv_scales = calibrate_kv_scales(model, ids, mask, mode=policy.kv_cache.scale)
    calls = _count_producers(monkeypatch)
    # The norms after a residual add take the fused add's kernel on the GPU (test_decoder_fused_add_norm.py);
    # off here, so every norm runs rms_norm_quantize.
    monkeypatch.setattr(decoder_module._Ops, "fused_add", lambda self, x: False)
    with torch.inference_mode():
        logits = model(ids, mask)
    assert calls == {"rms_norm_quantize": 2 * model.config.num_layers, "silu_mul_quantize": model.config.num_layers}
    monkeypatch.setattr(decoder_module._Ops, "fused_input", lambda self, readers, x: None)
    monkeypatch.setattr(decoder_module._Ops, "silu_mul", lambda self, gate_up: _invariant_swiglu(gate_up))
    with torch.inference_mode():
        ref = model(ids, mask)
    assert torch.equal(logits.view(torch.int16), ref.view(torch.int16))


def _invariant_swiglu(gate_up):
    from precision_engine.numerics import invariant

    gate, up = gate_up.chunk(2, dim=-1) if isinstance(gate_up, torch.Tensor) else gate_up
    return invariant.silu(gate) * up


@pytest.mark.parametrize("fuse_linears", [True, False])
def test_only_ops_whose_readers_share_one_fp8_input_format_fuse(fuse_linears, monkeypatch):
    """Layer 0's k_proj quantizes its input with pow2 scales (a second format next to q/v's), layer 1's up_proj
    is BF16: those two norms stay unfused, the other two norms and both SwiGLU products fuse. With
    `fuse_linears` off (each projection its own call) the parts read the one handed-over Q(x) each."""
    model = _model("jetrl_unified", "tiny-llama", "train")
    model.fuse_linears = fuse_linears
    k_proj = model.model.layers[0].self_attn.k_proj
    k_proj.spec = replace(k_proj.spec, input=replace(k_proj.spec.input, scale=ScaleKind.POW2))
    mlp = model.model.layers[1].mlp
    mlp.up_proj = mlp.up_proj.to_linear()
    calls = _assert_fused_equals_unfused(model, "train", monkeypatch)
    assert calls == {"rms_norm_quantize": 2, "silu_mul_quantize": 2}
