"""A rollout forward (no autograd) takes o_proj's 1x128 input quantization from the attention kernel's epilogue
(`_Ops.fused_output`, `triton_invariant.attention(..., quantize=fmt)`) and gives the logits of the path where
o_proj quantizes its input itself, bit for bit.

The model is tiny-llama with head_dim 128 (one 1x128 group per head, as Llama-3.1-8B). On the GPU the handover
runs wherever the Triton attention kernel runs without autograd (rollout in both modes: every forward in
batch-invariant mode, the cached prefill and decode steps in fast mode); the reference is the same model with
`fused_output` forced off. On the CPU the decoder runs the torch attention and no handover, so the CPU test runs
the kernel in Triton's interpreter (`invariant.attention` swapped for it) with `fused_output`'s conditions less
its CUDA check, in batch-invariant mode. Both cover the full forward, the cached prefill and a decode step (an
FP8 cache's kernel in jetrl_unified_kv's cached steps, the BF16 one elsewhere); the CPU cases take 1-4 s each on
one core (Triton's interpreter).
"""

from __future__ import annotations

import pytest
import torch

import precision_engine.models.decoder as decoder_module
from precision_engine.compile import compile_plan
from precision_engine.models import resolve_config
from precision_engine.models.decoder import Decoder, calibrate_kv_scales
from precision_engine.models.inventory import inventory_from_model
from precision_engine.numerics import invariant
from precision_engine.policy import load_policy
from precision_engine.rewrite import apply

from test_decoder_fused_add_norm import _ids, _rollout

CONFIG = {**resolve_config("tiny-llama"), "head_dim": 128}  # 4 heads of 128: q_proj 256 -> 512, o_proj 512 -> 256


def _model(policy_name: str, device: str, *, batch_invariant: bool = True):
    """The model rewritten for the rollout phase of the shipped policy, with KV scales where it caches in FP8."""
    policy = load_policy(f"policies/{policy_name}.yaml")
    model = Decoder.from_config(CONFIG, seed=0, dtype="bf16", device=device, batch_invariant=batch_invariant)
    apply(compile_plan(policy, inventory_from_model(model, model_id="tiny-llama-d128", config=CONFIG)), model,
          "rollout")
    scales = calibrate_kv_scales(model, *_ids(device), mode=policy.kv_cache.scale) if policy.kv_cache.is_fp8 else None
    model.kv_scales = scales
    return model.eval(), scales


def _record(monkeypatch, fused_output=None) -> list:
    """Route `_Ops.fused_output` (or `fused_output` in its place) through a recorder of the formats it returns."""
    seen, real = [], fused_output or decoder_module._Ops.fused_output

    def recording(self, reader, q):
        fmt = real(self, reader, q)
        seen.append(fmt)
        return fmt

    monkeypatch.setattr(decoder_module._Ops, "fused_output", recording)
    return seen


def _assert_handover_keeps_the_logits(model, scales, monkeypatch, fused_output=None) -> list:
    seen = _record(monkeypatch, fused_output)
    fused = _rollout(model, scales)
    calls = list(seen)
    with monkeypatch.context() as patch:
        patch.setattr(decoder_module._Ops, "fused_output", lambda self, reader, q: None)
        unfused = _rollout(model, scales)
    for a, b in zip(fused, unfused):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    return calls


def _without_the_cuda_check(self, reader, q):
    """`_Ops.fused_output` less its `q.is_cuda` test (the interpreter's kernel runs on CPU tensors)."""
    from precision_engine.numerics import triton_invariant

    fmt = None if torch.is_grad_enabled() else self.fused_input((reader,), q)
    return fmt if fmt is not None and triton_invariant.attention_quantize_fits(q.shape[-1], fmt) else None


@pytest.mark.skipif(torch.cuda.is_available(), reason="Triton's interpreter is set up only without CUDA (conftest)")
@pytest.mark.parametrize("policy_name", ["jetrl_unified_kv", "jetrl_unified"])
def test_interpreted_kernel_keeps_the_logits(policy_name, monkeypatch):
    from precision_engine.numerics import triton_invariant

    model, scales = _model(policy_name, "cpu")
    monkeypatch.setattr(invariant, "attention", triton_invariant.attention)
    calls = _assert_handover_keeps_the_logits(model, scales, monkeypatch, _without_the_cuda_check)
    # every layer of the full forward, the prefill and each decode step
    assert len(calls) == model.config.num_layers * 3 and all(fmt is not None for fmt in calls)


def test_cpu_and_autograd_keep_o_projs_own_quantizer(monkeypatch):
    """The CPU forward (the torch attention) and a training forward hand nothing over."""
    model, scales = _model("jetrl_unified", "cpu")
    seen = _record(monkeypatch)
    _rollout(model, scales)
    model(*_ids("cpu"))
    assert seen and all(fmt is None for fmt in seen)


@pytest.mark.gpu
@pytest.mark.parametrize("batch_invariant", [True, False], ids=["invariant", "fast"])
@pytest.mark.parametrize("policy_name", ["bf16_baseline", "jetrl_unified", "jetrl_unified_kv"])
def test_gpu_rollout_hands_over_and_keeps_the_logits(policy_name, batch_invariant, monkeypatch):
    """The real kernels on CUDA, both modes: every layer's attention quantizes for an FP8 o_proj (none for a BF16
    one), logits bitwise the unfused path's; a forward with autograd (the trainer's) hands nothing over."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    model, scales = _model(policy_name, "cuda", batch_invariant=batch_invariant)
    calls = _assert_handover_keeps_the_logits(model, scales, monkeypatch)
    forwards = 3 if batch_invariant else 2  # fast mode's full forward runs SDPA, not the kernel
    assert len(calls) == model.config.num_layers * forwards
    assert all((fmt is not None) == (policy_name != "bf16_baseline") for fmt in calls)
    seen = _record(monkeypatch)
    model(*_ids("cuda"))
    assert all(fmt is None for fmt in seen)
