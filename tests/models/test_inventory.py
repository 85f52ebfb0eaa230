"""Built-in architectures built on the meta device: module kinds, shapes and FLOPs."""

import json

import pytest
import torch

from precision_engine.errors import ModelError
from precision_engine.models import BUILTIN_MODELS, ModuleKind, build_model, load_inventory


def count(inventory, kind):
    return len(inventory.of_kind(kind))


@pytest.mark.parametrize(
    "name, params",
    [
        # Published parameter counts: the configs written out in the registry reproduce the real models.
        ("llama-3.1-8b", 8_030_261_248),
        ("qwen2.5-7b", 7_615_616_512),
        ("qwen3-8b", 8_190_735_360),
        ("qwen3-30b-a3b", 30_532_122_624),
    ],
)
def test_builtin_configs_reproduce_published_parameter_counts(name, params):
    model = build_model(name)
    assert next(model.parameters()).device.type == "meta"
    assert sum(p.numel() for p in model.parameters()) == params


def test_llama_8b_inventory():
    inventory = load_inventory("llama-3.1-8b")
    assert inventory.architecture == "LlamaForCausalLM"
    assert count(inventory, ModuleKind.LINEAR) == 32 * 7 + 1  # + lm_head
    assert count(inventory, ModuleKind.NORM) == 32 * 2 + 1
    assert count(inventory, ModuleKind.EMBEDDING) == 1
    down = inventory.by_name["model.layers.31.mlp.down_proj"]
    assert down.weight_shape == (4096, 14336)
    assert down.gemm_weights == (("weight", (4096, 14336)),)
    assert down.flops_per_token == 2 * 4096 * 14336
    assert inventory.by_name["lm_head"].flops_per_token == 2 * 128256 * 4096
    # all GEMM flops = 2 x the GEMM parameters (everything but embeddings and norms)
    gemm_params = 8_030_261_248 - 128256 * 4096 - 4096 * 65
    assert inventory.gemm_flops_per_token == 2 * gemm_params


def test_qwen3_moe_records_fused_experts_and_router():
    inventory = load_inventory("qwen3-30b-a3b")
    experts = inventory.of_kind(ModuleKind.EXPERTS)
    assert len(experts) == 48 and count(inventory, ModuleKind.ROUTER) == 48
    first = inventory.by_name["model.layers.0.mlp.experts"]
    assert first.type == "Qwen3MoeExperts"
    assert dict(first.params) == {"gate_up_proj": (128, 1536, 2048), "down_proj": (128, 2048, 768)}
    assert first.gemm_weights == (("gate_up_proj", (1536, 2048)), ("down_proj", (2048, 768)))
    assert first.num_experts == 128 and first.experts_per_token == 8
    assert first.flops_per_token == 2 * (1536 * 2048 + 2048 * 768) * 8
    router = inventory.by_name["model.layers.0.mlp.gate"]
    assert router.type == "Qwen3MoeTopKRouter" and router.weight_shape == (128, 2048)
    assert count(inventory, ModuleKind.LINEAR) == 48 * 4 + 1  # attention projections + lm_head


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "tiny-qwen3-moe"])
def test_tiny_models_tile_into_128_blocks(name):
    inventory = load_inventory(name)
    shapes = [shape for m in inventory.modules for _, shape in m.gemm_weights]
    assert shapes and all(n % 128 == 0 and k % 128 == 0 for n, k in shapes)
    assert inventory.config["num_hidden_layers"] == 2


def test_every_builtin_loads():
    for name in BUILTIN_MODELS:
        assert load_inventory(name).model_id == name


def test_hf_id_is_an_offline_alias():
    assert load_inventory("Qwen/Qwen3-8B").model_id == "qwen3-8b"
    assert load_inventory("LLAMA-3.1-8B").model_id == "llama-3.1-8b"


def test_local_dir_and_config_path(tmp_path):
    config = dict(BUILTIN_MODELS["tiny-llama"].config, num_hidden_layers=3)
    (tmp_path / "config.json").write_text(json.dumps(config))
    from_dir = load_inventory(str(tmp_path))
    from_file = load_inventory(str(tmp_path / "config.json"))
    assert from_dir.modules == from_file.modules
    assert count(from_dir, ModuleKind.LINEAR) == 3 * 7 + 1
    assert from_dir.model_id == str(tmp_path)


def test_quantization_config_of_a_checkpoint_is_ignored(tmp_path):
    config = dict(BUILTIN_MODELS["tiny-qwen3"].config)
    config["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    inventory = load_inventory(str(tmp_path))
    assert {m.type for m in inventory.of_kind(ModuleKind.LINEAR)} == {"Linear"}


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("llama-3.1-8", "did you mean 'llama-3.1-8b'?"),
        ("meta-llama/Llama-3.2-1B", "hub ids are never downloaded"),
        ("nonsense", "Built-in: tiny-llama, tiny-qwen3"),
        ("(test model)", "Built-in: tiny-llama"),
        ("", "Built-in: tiny-llama"),  # was "a directory without a config.json" about the working directory  # the tiny models' placeholder hf_id used to resolve to tiny-llama
    ],
)
def test_unknown_spec_names_builtins(spec, expected):
    with pytest.raises(ModelError, match="unknown model") as err:
        load_inventory(spec)
    assert expected in str(err.value)


def test_bad_local_configs(tmp_path):
    with pytest.raises(ModelError, match="without a config.json"):
        load_inventory(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match="not a readable config.json"):
        load_inventory(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ModelError, match="no 'model_type'"):
        load_inventory(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen_3"}))
    with pytest.raises(ModelError, match="does not know model_type 'qwen_3'; did you mean 'qwen3'"):
        load_inventory(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "clip"}))
    with pytest.raises(ModelError, match="'clip' is not a causal language model"):
        load_inventory(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 100}))
    with pytest.raises(ModelError, match="rejects this llama config: .*not a multiple of the number of attention"):
        load_inventory(str(tmp_path))
    llama = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 128, "num_attention_heads": 1,
             "num_hidden_layers": 1, "vocab_size": 128}
    (tmp_path / "config.json").write_text(json.dumps({**llama, "num_experts_per_tok": "two"}))  # was a ValueError
    with pytest.raises(ModelError, match="num_experts_per_tok must be a non-negative integer, got 'two'"):
        load_inventory(str(tmp_path))


def test_build_model_cpu_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model("tiny-llama", device="cpu", dtype="bf16", seed=7)
    b = build_model("tiny-llama", device="cpu", dtype=torch.bfloat16, seed=7)
    c = build_model("tiny-llama", device="cpu", dtype="bf16", seed=8)
    assert torch.equal(torch.rand(1), before)
    weight_a = a.model.layers[0].self_attn.q_proj.weight
    assert weight_a.dtype == torch.bfloat16 and weight_a.device.type == "cpu"
    assert torch.equal(weight_a, b.model.layers[0].self_attn.q_proj.weight)
    assert not torch.equal(weight_a, c.model.layers[0].self_attn.q_proj.weight)
    with pytest.raises(ModelError, match="unknown dtype"):
        build_model("tiny-llama", dtype="int3")
