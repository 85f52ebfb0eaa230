"""The decoder runs FP8 q/k/v and gate/up as one GEMM each (numerics.fused_linear), in both phases.

On the CPU the forward's reference kernel is exact, so the grouped decoder's logits equal the per-module path's
(`fuse_linears` off) bitwise. Modules with hooks (FSDP2's units, verify's layer recorder) run their own calls.
Gradients differ where the grouped dgrad sums q/k/v (gate/up) inside one GEMM
instead of adding three BF16 results; a last-bit change there flips E4M3 roundings of the next layer's dy, so
the difference grows to the FP8 noise level: every parameter's gradient within SQNR >= 20 dB of the per-module
one (25-26 dB seen), and against the BF16 model's gradients no more than 1.5 dB worse than the per-module one's
(the FP8 runs are 15-16 dB from BF16 per parameter on these 2-layer models; the grouped one was at most 1.1 dB
below the per-module one).
"""

import pytest
import torch

import precision_engine.numerics.linear as linear_module
from precision_engine.compile import compile_plan
from precision_engine.models import load_inventory, resolve_config
from precision_engine.models.decoder import Decoder
from precision_engine.models.inventory import inventory_from_model
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.policy import load_policy
from precision_engine.rewrite import apply, restore

from helpers import sqnr_db

QWEN2_TINY = {**resolve_config("tiny-llama"), "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
              "rope_theta": 1000000.0}  # q/k/v biases


def _fp8_decoder(name: str, seed: int = 0) -> Decoder:
    config = QWEN2_TINY if name == "qwen2" else name
    model = Decoder.from_config(config, seed=seed, dtype="bf16")
    inventory = inventory_from_model(model, model_id=name, config=QWEN2_TINY) if name == "qwen2" \
        else load_inventory(name)
    apply(compile_plan(load_policy("policies/jetrl_unified.yaml"), inventory), model, "train")
    if name == "qwen2":
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("bias"):
                    p.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
    return model.train()


def _ids(b=3, length=19):
    ids = torch.randint(0, 512, (b, length), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(b, length, dtype=torch.long)
    mask[1, :5] = 0
    return ids, mask


def _hooked(model: Decoder) -> list:
    """A no-op forward hook on every FP8 linear (as FSDP2's units and verify's recorder hook them)."""
    return [m.register_forward_hook(lambda *_: None) for m in model.modules() if isinstance(m, Fp8Linear)]


def _logits_and_grads(model: Decoder, ids, mask):
    logits = model(ids, mask)
    logits.float().square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return logits.detach(), grads


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "qwen2"])
def test_grouped_equals_per_module_bitwise_forward_close_grads(name):
    model = _fp8_decoder(name)
    ids, mask = _ids()
    grouped, grouped_grads = _logits_and_grads(model, ids, mask)
    model.fuse_linears = False
    separate, separate_grads = _logits_and_grads(model, ids, mask)
    restore(model)
    _, bf16_grads = _logits_and_grads(model, ids, mask)
    assert torch.equal(grouped.view(torch.int16), separate.view(torch.int16))
    assert grouped_grads.keys() == separate_grads.keys() == bf16_grads.keys()
    assert {"model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.up_proj.weight"} <= grouped_grads.keys()
    for key, grad in grouped_grads.items():
        assert sqnr_db(separate_grads[key], grad) >= 20, key
        assert sqnr_db(bf16_grads[key], grad) >= sqnr_db(bf16_grads[key], separate_grads[key]) - 1.5, key


def _count_gemms(monkeypatch) -> list:
    calls = []
    real = linear_module.fp8_gemm

    def counting(a, b, **kwargs):
        calls.append((kwargs.get("gemm", linear_module.Gemm.FPROP), tuple(b.data.shape)))
        return real(a, b, **kwargs)

    monkeypatch.setattr(linear_module, "fp8_gemm", counting)
    return calls


def test_one_fp8_gemm_per_group_in_forward_and_backward(monkeypatch):
    """tiny-llama (2 layers): q/k/v [256 + 128 + 128, 256] and gate/up [512 + 512, 256] run as one GEMM each,
    so a layer runs 4 forward GEMMs (qkv, o, gate_up, down) instead of 7, and 4 dgrad + 4 wgrad."""
    model = _fp8_decoder("tiny-llama")
    ids, mask = _ids()
    calls = _count_gemms(monkeypatch)
    model(ids, mask).float().sum().backward()
    fprop = [shape for gemm, shape in calls if gemm is linear_module.Gemm.FPROP]
    assert fprop == [(512, 256), (256, 256), (1024, 256), (256, 512)] * 2
    assert len(calls) == 3 * len(fprop)

    for per_module in ("hooks", "fuse_linears off"):
        calls.clear()
        handles = _hooked(model) if per_module == "hooks" else []
        model.fuse_linears = per_module != "fuse_linears off"
        with torch.no_grad():
            model(ids, mask)
        for handle in handles:
            handle.remove()
        assert len(calls) == 7 * 2, per_module


def test_rollout_phase_groups_and_keeps_the_training_bits():
    """Apply rollout, then train (jetrl_unified's phases share numerics): the same grouped bits either way."""
    model = _fp8_decoder("tiny-qwen3")
    plan = compile_plan(load_policy("policies/jetrl_unified.yaml"), load_inventory("tiny-qwen3"))
    ids, mask = _ids()
    train = model(ids, mask).detach()
    apply(plan, model, "rollout")
    model.eval()
    with torch.inference_mode():
        rollout = model(ids, mask)
    assert model.model.layers[0].self_attn.q_proj._group_cache is not None
    assert torch.equal(train.view(torch.int16), rollout.view(torch.int16))


def test_rollout_weights_after_grouping_are_each_parts_own():
    """Grouped, a part's Q(W) is its rows of the stack (a view): what export and weight sync read stays each
    module's own block-FP8 weight, shape and bytes (`to_block_fp8`)."""
    from precision_engine.integrations.hf_export import iter_rollout_weights
    from precision_engine.numerics.exchange import to_block_fp8

    model = _fp8_decoder("tiny-llama")
    with torch.no_grad():
        model(*_ids())
    assert model.model.layers[0].self_attn.k_proj.quantized_weight().data._base is not None
    plan = compile_plan(load_policy("policies/jetrl_unified.yaml"), load_inventory("tiny-llama"))
    weights = dict(iter_rollout_weights(model, plan))
    for name, module in model.named_modules():
        if isinstance(module, Fp8Linear):
            data, scale = to_block_fp8(module.weight.detach())
            assert torch.equal(weights[f"{name}.weight"].view(torch.uint8), data.view(torch.uint8)), name
            assert torch.equal(weights[f"{name}.weight_scale_inv"], scale), name
