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
