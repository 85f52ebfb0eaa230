"""SGLang's KV scale file: schema, JSON round trip, per-head reduction per TP rank, non-finite refusal."""

import json

import pytest
import torch

from precision_engine.errors import UsageError
from precision_engine.integrations.sglang_kv_scales import (
    read_sglang_kv_scales,
    sglang_kv_scales,
    write_sglang_kv_scales,
)
from precision_engine.models import build_model
from precision_engine.numerics.kv_cache import KVScales
from precision_engine.numerics.specs import KVScale
from precision_engine.rewrite.kv_cache import calibrate_kv_scales


@pytest.fixture(scope="module")
def model():
    return build_model("tiny-llama", device="cpu", dtype="bf16", seed=3)


def tokens(batch=2, seq=48, seed=1):
    return torch.randint(0, 512, (batch, seq), generator=torch.Generator().manual_seed(seed))


def test_sglang_json_schema_and_round_trip(tmp_path, model):
    scales = calibrate_kv_scales(model, tokens())
    path = write_sglang_kv_scales(tmp_path / "kv.json", scales, "llama")
    document = json.loads(path.read_text())
    # vLLM/SGLang QuantParamSchema: {model_type, kv_cache: {dtype, scaling_factor: {tp_rank: {layer: float}}}}
    assert document["model_type"] == "llama"
    assert document["kv_cache"]["dtype"] == "float8_e4m3fn"
    assert list(document["kv_cache"]["scaling_factor"]) == ["0"]
    assert list(document["kv_cache"]["scaling_factor"]["0"]) == ["0", "1"]
    back = read_sglang_kv_scales(path)
    assert torch.equal(back.k, scales.k) and torch.equal(back.v, scales.v)  # floats survive JSON exactly


def test_sglang_json_per_head_reduces_per_rank():
    k = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    v = torch.tensor([[0.5, 5.0, 1.0, 1.0]])
    factors = sglang_kv_scales(KVScales(k, v), "qwen3", tp_size=2)["kv_cache"]["scaling_factor"]
    assert factors == {"0": {"0": 5.0}, "1": {"0": 4.0}}  # rank 0 holds heads 0-1, rank 1 heads 2-3
    replicated = sglang_kv_scales(KVScales(k[:, :2], v[:, :2]), "qwen3", tp_size=4)["kv_cache"]["scaling_factor"]
    assert [replicated[str(r)]["0"] for r in range(4)] == [1.0, 1.0, 5.0, 5.0]
    with pytest.raises(UsageError, match="tp_size 3"):
        sglang_kv_scales(KVScales(k, v), "qwen3", tp_size=3)


def test_nonfinite_states_give_nan_scales_and_refuse_export():
    scales = KVScales.from_amax(torch.tensor([[1.0, float("nan")]]), torch.tensor([[1.0, 1.0]]), KVScale.PER_HEAD)
    assert torch.isnan(scales.k[0, 1]) and not torch.isnan(scales.k[0, 0])
    with pytest.raises(UsageError, match="NaN"):
        sglang_kv_scales(scales, "llama")


# ------------------------------------------------- what SGLang and vLLM apply (issue 8, item 5)


def _kv_export(tmp_path, scales, tp_size=1, policy="jetrl_unified_kv", model_name="tiny-qwen3", overrides=()):
    from precision_engine.compile import compile_plan
    from precision_engine.integrations import export_checkpoint
    from precision_engine.models import build_model, load_inventory
    from precision_engine.policy import load_policy
    from precision_engine.rewrite import apply

    plan = compile_plan(load_policy(policy, overrides=overrides), load_inventory(model_name))
    model = build_model(model_name, device="cpu", dtype="bf16", seed=3)
    apply(plan, model, "rollout")
    return export_checkpoint(model, plan, tmp_path / "ckpt", kv_scales=scales, tp_size=tp_size), model, plan


def test_checkpoint_carries_per_layer_k_and_v_scale_tensors(tmp_path):
    """SGLang's Fp8KVCacheMethod and vLLM read `self_attn.k_scale` / `v_scale` from the checkpoint (the JSON path
    sets a float their FA3 / flashinfer backends ignore); per-head scales reduce to the max over heads."""
    from precision_engine.integrations import load_checkpoint, read_checkpoint

    k = torch.tensor([[0.01, 0.03], [0.02, 0.05]])
    v = torch.tensor([[0.04, 0.02], [0.01, 0.06]])
    out, model, _ = _kv_export(tmp_path, KVScales(k, v))
    tensors = read_checkpoint(out)
    for layer in range(2):
        k_scale = tensors[f"model.layers.{layer}.self_attn.k_scale"]
        assert k_scale.dtype == torch.float32 and k_scale.shape == ()
        assert k_scale == k[layer].max() and tensors[f"model.layers.{layer}.self_attn.v_scale"] == v[layer].max()
    assert "model.layers.0.self_attn.k_scale" in load_checkpoint(model, out)


def test_the_json_is_written_for_the_servers_tensor_parallel_size(tmp_path):
    import json

    scales = KVScales(torch.tensor([0.01, 0.02]), torch.tensor([0.01, 0.02]))
    bf16_weights = ("kv_cache.dtype=float8_e4m3",)  # BF16 shards split anywhere; only the KV file matters here
    out, _, _ = _kv_export(tmp_path, scales, tp_size=2, policy="bf16_baseline", overrides=bf16_weights)
    assert sorted(json.loads((out / "kv_cache_scales.json").read_text())["kv_cache"]["scaling_factor"]) == ["0", "1"]


def test_tp_checks_every_ranks_fp8_shard(tmp_path):
    """tiny-qwen3's k/v projections (2 KV heads x 64) give each of 2 ranks 64 rows: not whole 128-row blocks."""
    from precision_engine.errors import UnsupportedError

    scales = KVScales(torch.tensor([0.01, 0.02]), torch.tensor([0.01, 0.02]))
    with pytest.raises(UnsupportedError, match=r"k_proj: at --tp 2 each rank holds 64 of its 128 output rows"):
        _kv_export(tmp_path, scales, tp_size=2)
    assert not (tmp_path / "ckpt").exists()


def test_power_of_two_scales_write_scale_fmt_ue8m0():
    from precision_engine.compile import compile_plan
    from precision_engine.integrations import quantization_config
    from precision_engine.models import load_inventory
    from precision_engine.policy import load_policy

    pow2 = load_policy("jetrl_unified", overrides=("formats.w8.scale=pow2",))
    assert quantization_config(compile_plan(pow2, load_inventory("tiny-qwen3")))["scale_fmt"] == "ue8m0"
    plain = load_policy("jetrl_unified")
    assert "scale_fmt" not in quantization_config(compile_plan(plain, load_inventory("tiny-qwen3")))
