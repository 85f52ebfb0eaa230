"""A rollout forward (no autograd) runs the decoder's launch fusions and gives the logits of the separate ops bit
for bit: each residual add inside the RMSNorm after it (`_Ops.add_norm_into`, numerics.fused_quant.add_rms_norm)
and RoPE of q and k in one launch (invariant.rope_qk).

On the GPU the fused add runs wherever the norm runs numerics.invariant's kernel without autograd (rollout in
both modes); the reference is the same model with `_Ops.fused_add` forced off and q and k rotated by two
`invariant.rope` calls. On the CPU the decoder keeps the separate ops, so the CPU test forces both fusions in
batch-invariant mode and runs their kernels in Triton's interpreter, with every unfused RMSNorm on the
interpreter's RMSNorm kernel too (the ops the GPU runs; the CPU's torch RMSNorm sums the squares in another
order) and RoPE in torch's ops (the kernel's bits). Both cover the full forward and the cached prefill (logits
of the last prompt token) and a decode step. The CPU cases take ~5 s each on one core (Triton's interpreter;
the BF16 one, whose norm-only kernel the FP8 one's final norm covers too, is marked slow).
"""

from __future__ import annotations


import pytest
import torch

import precision_engine.models.decoder as decoder_module
from precision_engine.compile import compile_plan
from precision_engine.models import load_inventory
from precision_engine.models.decoder import Decoder, calibrate_kv_scales
from precision_engine.numerics import fused_quant, invariant
from precision_engine.policy import load_policy
from precision_engine.rewrite import apply
from precision_engine.rl.kv_cache import KVCache

PROMPT, STEPS = 4, 1


def _model(policy_name: str, name: str, device: str, *, batch_invariant: bool = True):
    """`name` rewritten for the rollout phase of the shipped policy, with KV scales where it caches in FP8."""
    policy = load_policy(f"policies/{policy_name}.yaml")
    model = Decoder.from_config(name, seed=0, dtype="bf16", device=device, batch_invariant=batch_invariant)
    apply(compile_plan(policy, load_inventory(name)), model, "rollout")
    ids, mask = _ids(device)
    scales = calibrate_kv_scales(model, ids, mask, mode=policy.kv_cache.scale) if policy.kv_cache.is_fp8 else None
    model.kv_scales = scales
    return model.eval(), scales


def _ids(device: str):
    ids = torch.randint(0, 512, (2, PROMPT + STEPS), generator=torch.Generator().manual_seed(0)).to(device)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    return ids, mask


def _rollout(model: Decoder, scales):
    """Logits of the full forward, of a cached prefill (last prompt token) and of STEPS decode steps."""
    ids, mask = _ids(model.lm_head.weight.device.type)
    b, device = ids.shape[0], ids.device
    with torch.inference_mode():
        full = model(ids, mask)
        cache = KVCache.for_model(model, b, PROMPT + STEPS, scales=scales)
        positions = torch.arange(PROMPT, device=device).expand(b, PROMPT)
        prompt_len = torch.full((b,), PROMPT, device=device)
        outs = [model.forward_cached(ids[:, :PROMPT], positions, prompt_len, cache, read_len=PROMPT,
                                     logits_index=prompt_len - 1)]
        for t in range(PROMPT, PROMPT + STEPS):
            outs.append(model.forward_cached(ids[:, t : t + 1], torch.full((b, 1), t, device=device),
                                             torch.full((b,), t + 1, device=device), cache, read_len=t + 1)[:, 0])
    return [full, *outs]


def _count_fused(monkeypatch, **kwargs) -> list:
    """Route the decoder's add_rms_norm through a recorder (with `kwargs`); returns the list of fmts it saw."""
    seen, real = [], fused_quant.add_rms_norm

    def recording(x, y, weight, eps, fmt=None):
        seen.append(fmt)
        return real(x, y, weight, eps, fmt, **kwargs)

    monkeypatch.setattr(decoder_module, "add_rms_norm", recording)
    return seen


def _assert_fused_equals_unfused(model, scales, monkeypatch, **kwargs) -> list:
    seen = _count_fused(monkeypatch, **kwargs)
    fused = _rollout(model, scales)
    calls = list(seen)
    with monkeypatch.context() as patch:
        patch.setattr(decoder_module._Ops, "fused_add", lambda self, x: False)
        patch.setattr(invariant, "rope_qk", lambda q, k, cos, sin: (invariant.rope(q, cos, sin),
                                                                    invariant.rope(k, cos, sin)))
        unfused = _rollout(model, scales)
    assert seen == calls  # the reference ran no fused add
    for a, b in zip(fused, unfused):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    return calls


def _assert_every_norm_after_an_add_fused(model, calls, fp8: bool):
    """Per forward: 2 per layer but the first layer's input norm, plus the final norm; all but the final
    one quantize for FP8 readers. Forwards: the full one, the prefill and STEPS decode steps."""
    layers = model.config.num_layers
    per_forward = [fp8] * (2 * layers - 1) + [False]
    assert [fmt is not None for fmt in calls] == per_forward * (2 + STEPS)


@pytest.mark.skipif(torch.cuda.is_available(), reason="Triton's interpreter is set up only without CUDA (conftest)")
@pytest.mark.parametrize("policy_name", ["jetrl_unified_kv", pytest.param("bf16_baseline", marks=pytest.mark.slow)])
def test_interpreted_kernel_keeps_the_logits_of_the_separate_ops(policy_name, monkeypatch):
    from precision_engine.numerics import triton_invariant

    model, scales = _model(policy_name, "tiny-llama", "cpu")
    monkeypatch.setattr(invariant, "rms_norm", triton_invariant.rms_norm)
    monkeypatch.setattr(invariant, "rope_qk", triton_invariant.rope_qk)
    monkeypatch.setattr(decoder_module._Ops, "fused_add",
                        lambda self, x: self.invariant and not torch.is_grad_enabled())
    calls = _assert_fused_equals_unfused(model, scales, monkeypatch, backend="triton")
    _assert_every_norm_after_an_add_fused(model, calls, policy_name != "bf16_baseline")


def test_cpu_and_autograd_keep_the_separate_ops(monkeypatch):
    """The CPU forward (no Triton RMSNorm to fuse into) and a training forward record no fused add."""
    model, scales = _model("jetrl_unified", "tiny-llama", "cpu")
    seen = _count_fused(monkeypatch)
    _rollout(model, scales)
    ids, mask = _ids("cpu")
    model(ids, mask)
    assert seen == []


@pytest.mark.gpu
@pytest.mark.parametrize("batch_invariant", [True, False], ids=["invariant", "fast"])
@pytest.mark.parametrize("policy_name", ["bf16_baseline", "jetrl_unified", "jetrl_unified_kv"])
def test_gpu_rollout_fuses_and_keeps_the_logits(policy_name, batch_invariant, monkeypatch):
    """The real kernels on CUDA, both modes: every norm after an add fuses, logits bitwise the separate ops'
    (RoPE of q and k in two launches there); a forward with autograd (the trainer's) fuses no add."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    model, scales = _model(policy_name, "tiny-llama", "cuda", batch_invariant=batch_invariant)
    calls = _assert_fused_equals_unfused(model, scales, monkeypatch)
    _assert_every_norm_after_an_add_fused(model, calls, policy_name != "bf16_baseline")
    seen = _count_fused(monkeypatch)
    model(*_ids("cuda"))
    assert seen == []
