"""The built-in decoder: HF's names and weights, HF's logits, padding-independent rows, FP8 KV rounding."""

import pytest
import torch

from precision_engine.compile import compile_plan
from precision_engine.errors import ModelError, UnsupportedError, UsageError
from precision_engine.models import load_inventory, resolve_config
from precision_engine.models.decoder import Decoder, calibrate_kv_scales, load_decoder
from precision_engine.models.loader import build_model
from precision_engine.numerics.kv_cache import KVScales, dequantize_kv, quantize_kv
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.policy import KVScale, load_policy
from precision_engine.rewrite import apply
from precision_engine.rewrite.kv_cache import calibrate_kv_scales as hf_calibrate_kv_scales

QWEN2_TINY = {  # Qwen2: q/k/v biases, no o_proj bias, tied embeddings
    **resolve_config("tiny-llama"),
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "tie_word_embeddings": True,
    "rope_theta": 1000000.0,
}
CONFIGS = {"tiny-llama": resolve_config("tiny-llama"), "tiny-qwen3": resolve_config("tiny-qwen3"), "qwen2": QWEN2_TINY}


def _hf(name: str, dtype="fp32", seed=0):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = dict(CONFIGS[name])
    if name in ("tiny-llama", "tiny-qwen3"):
        return build_model(name, device="cpu", dtype=dtype, seed=seed)
    torch.manual_seed(seed)
    model_type = config.pop("model_type")
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **config), dtype=torch.float32)
    with torch.no_grad():
        for name_, p in model.named_parameters():
            if name_.endswith("bias"):
                p.normal_(0, 0.02)  # HF initialises biases to zero: make them matter
    return model.eval()


def _ids(seed=0, b=3, length=20):
    ids = torch.randint(0, 512, (b, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(b, length, dtype=torch.long)
    mask[1, :6] = 0  # left padded
    mask[2, 13:] = 0  # right padded
    return ids, mask


@pytest.mark.parametrize("name", list(CONFIGS))
def test_names_and_state_dict_are_hfs(name):
    hf = _hf(name)
    ours = Decoder(CONFIGS[name])
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in hf.state_dict().items()}
    hf_linears = {n for n, m in hf.named_modules() if isinstance(m, torch.nn.Linear)}
    assert {n for n, m in ours.named_modules() if isinstance(m, torch.nn.Linear)} == hf_linears
    if name == "qwen2":
        assert ours.lm_head.weight is ours.model.embed_tokens.weight


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("batch_invariant", [True, False])
def test_logits_match_transformers(name, batch_invariant):
    """fp32, same weights: HF's logits within 1e-5 (relative) on real tokens, left- and right-padded rows.
    (HF gives a left-padded row positions that start at its padding; RoPE is relative, so that is ~exact.)"""
    hf = _hf(name)
    ours = Decoder(CONFIGS[name], batch_invariant=batch_invariant)
    ours.load_state_dict(hf.state_dict())
    ids, mask = _ids()
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask).logits
        got = ours(ids, mask)
    real = mask.bool()
    assert float((got[real] - want[real]).abs().max() / want[real].abs().max()) < 1e-5
    assert (got[~real] == 0).all()


def test_rows_are_independent_of_padding_side_and_batch():
    model = Decoder.from_config("tiny-qwen3", seed=2, dtype="bf16")
    ids, _ = _ids(length=17)
    with torch.no_grad():
        alone = [model(ids[i : i + 1]) for i in range(3)]
        right = torch.cat([ids, torch.zeros(3, 5, dtype=torch.long)], 1)
        left = torch.cat([torch.zeros(3, 5, dtype=torch.long), ids], 1)
        mask_r = torch.cat([torch.ones(3, 17), torch.zeros(3, 5)], 1)
        by_right, by_left = model(right, mask_r), model(left, mask_r.flip(1))
    for i in range(3):
        assert torch.equal(by_right[i, :17], alone[i][0]) and torch.equal(by_left[i, 5:], alone[i][0])


def test_cached_prefill_and_decode_equal_the_full_forward_bitwise():
    from precision_engine.rl.kv_cache import KVCache

    model = Decoder.from_config("tiny-llama", seed=3, dtype="bf16")
    ids, _ = _ids(length=12)
    with torch.no_grad():
        full = model(ids)
        cache = KVCache.for_model(model, 3, 12)
        prefill = model.forward_cached(ids[:, :7], torch.arange(7).expand(3, 7), torch.full((3,), 7), cache,
                                       read_len=7)
        steps = [
            model.forward_cached(ids[:, t : t + 1], torch.full((3, 1), t), torch.full((3,), t + 1), cache,
                                 read_len=t + 1)
            for t in range(7, 12)
        ]
    assert torch.equal(prefill, full[:, :7])
    assert torch.equal(torch.cat(steps, 1), full[:, 7:])


def test_plans_apply_unchanged():
    plan = compile_plan(load_policy("policies/jetrl_unified.yaml"), load_inventory("tiny-llama"))
    model = Decoder.from_config("tiny-llama")
    keys = set(model.state_dict())
    report = apply(plan, model, "train")
    assert report.matches(plan.phases["train"])
    assert isinstance(model.model.layers[0].mlp.down_proj, Fp8Linear)
    assert type(model.lm_head) is torch.nn.Linear and set(model.state_dict()) == keys
    with torch.no_grad():
        assert torch.isfinite(model(_ids()[0])).all()


def test_safetensors_directory_loads_hf_weights(tmp_path):
    hf = _hf("qwen2")
    hf.save_pretrained(tmp_path)  # tied: lm_head.weight is not stored
    ours = load_decoder(str(tmp_path), dtype="fp32")
    assert ours.lm_head.weight is ours.model.embed_tokens.weight
    for key, value in hf.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value)
    random_a = load_decoder("tiny-llama", seed=1)
    random_b = load_decoder("tiny-llama", seed=1)
    assert all(torch.equal(a, b) for a, b in zip(random_a.state_dict().values(), random_b.state_dict().values()))


def test_a_truncated_weights_file_is_named(tmp_path):
    _hf("qwen2").save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ModelError, match="model.safetensors: not a readable safetensors file"):
        load_decoder(str(tmp_path), dtype="fp32")


def test_moe_and_unknown_architectures_are_refused():
    with pytest.raises(UnsupportedError, match="mixture of experts"):
        Decoder(resolve_config("tiny-qwen3-moe"))
    with pytest.raises(UnsupportedError, match="llama, qwen2, qwen3"):
        Decoder({**resolve_config("tiny-llama"), "model_type": "gpt2"})
    with pytest.raises(UsageError, match="contiguous"):
        Decoder.from_config("tiny-llama")(torch.ones(1, 4, dtype=torch.long), torch.tensor([[1, 0, 1, 1]]))


def test_fp8_kv_rounding_in_the_full_forward_with_straight_through_gradient():
    model = Decoder.from_config("tiny-llama", seed=4, dtype="bf16")
    ids, mask = _ids()
    scales = calibrate_kv_scales(model, ids, mask, mode=KVScale.PER_HEAD)
    k_amax, v_amax = model.kv_amax(ids, mask)
    assert torch.equal(scales.k, KVScales.from_amax(k_amax, v_amax, KVScale.PER_HEAD).k)
    with torch.no_grad():
        plain = model(ids, mask)
        model.kv_scales = scales
        rounded = model(ids, mask)
    assert not torch.equal(plain, rounded)
    assert float((plain.float() - rounded.float()).abs().max()) < 0.1 * float(plain.float().abs().max())
    model.train()
    model(ids, mask).float().square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    k = torch.randn(2, 2, 5, 64).bfloat16()
    from precision_engine.models.decoder import _RoundKV

    assert torch.equal(_RoundKV.apply(k, scales.k[0]), dequantize_kv(quantize_kv(k, scales.k[0]), scales.k[0], k.dtype))


def test_kv_scales_move_to_the_models_device_when_set():
    """Calibration hands the scales over on the CPU; set on a model, they move to its device (meta here: the move
    is what is tested), so no forward reads them from host memory (a GPU sync per layer, and no CUDA graph)."""
    with torch.device("meta"):
        model = Decoder(resolve_config("tiny-llama"))
    scales = KVScales.from_amax(torch.rand(2, 4) + 0.5, torch.rand(2, 4) + 0.5, KVScale.PER_HEAD)
    model.kv_scales = scales
    assert model.kv_scales.k.device.type == model.kv_scales.v.device.type == "meta"
    assert model.kv_scales.k.shape == scales.k.shape and model.kv_scales.v.shape == scales.v.shape
    model.kv_scales = None
    assert model.kv_scales is None


def test_kv_amax_matches_transformers_calibration():
    hf = _hf("tiny-llama")
    ours = Decoder(CONFIGS["tiny-llama"], batch_invariant=False)
    ours.load_state_dict(hf.state_dict())
    ids, _ = _ids()  # no padding: HF's positions are ours
    for mode in KVScale:
        want = hf_calibrate_kv_scales(hf, ids, mode=mode)
        got = calibrate_kv_scales(ours, ids, mode=mode)
        assert torch.allclose(got.k, want.k, rtol=1e-5) and torch.allclose(got.v, want.v, rtol=1e-5)
