"""Block-FP8 export: the bytes the trainer multiplies with are the bytes the rollout engine loads."""

import json
from dataclasses import replace

import pytest
import torch

from precision_engine.compile import compile_plan
from precision_engine.errors import NonFiniteError, UsageError
from precision_engine.integrations import hf_export
from precision_engine.integrations.hf_export import (
    KV_SCALES_FILE,
    export_checkpoint,
    iter_rollout_weights,
    quantization_config,
    read_checkpoint,
)
from precision_engine.models import build_model, load_inventory
from precision_engine.numerics.exchange import to_block_fp8
from precision_engine.integrations.sglang_kv_scales import read_sglang_kv_scales
from precision_engine.numerics.kv_cache import KVScales
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.policy import load_policy
from precision_engine.policy.model import Rule
from precision_engine.rewrite import apply


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8),
                                                                     b.contiguous().view(torch.uint8))


@pytest.fixture(scope="module")
def plan():
    return compile_plan(load_policy("jetrl_unified"), load_inventory("tiny-qwen3"))


@pytest.fixture
def trainer(plan):
    """A train-phase model whose Fp8Linears have already quantized their weights in a forward pass."""
    model = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=5)
    apply(plan, model, "train")
    with torch.no_grad():
        model(torch.randint(0, 512, (1, 16)))
    return model


def test_quantization_config(plan):
    config = quantization_config(plan)
    assert config == {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "weight_block_size": [128, 128],
        "ignored_layers": ["lm_head"],
        "modules_to_not_convert": ["lm_head"],
    }


def test_config_loads_with_transformers_fp8_config(plan):
    from transformers import FineGrainedFP8Config

    loaded = FineGrainedFP8Config.from_dict(quantization_config(plan))
    assert loaded.quant_method == "fp8"
    assert tuple(loaded.weight_block_size) == (128, 128)
    assert loaded.activation_scheme == "dynamic"
    assert loaded.modules_to_not_convert == ["lm_head"]


def test_export_bytes_equal_trainer_fp8_weights(trainer, plan, tmp_path):
    out = export_checkpoint(trainer, plan, tmp_path / "ckpt")
    tensors = read_checkpoint(out)
    fp8_modules = {name: m for name, m in trainer.named_modules() if isinstance(m, Fp8Linear)}
    assert len(fp8_modules) == 14
    for name, module in fp8_modules.items():
        quantized = module.quantized_weight()  # what the trainer's forward multiplied with
        assert same_bytes(tensors[f"{name}.weight"], quantized.data), name
        assert same_bytes(tensors[f"{name}.weight_scale_inv"], quantized.scale), name
        assert tensors[f"{name}.weight"].dtype == torch.float8_e4m3fn
        assert tensors[f"{name}.weight_scale_inv"].shape == (module.out_features // 128, module.in_features // 128)
    state = trainer.state_dict()
    for name, tensor in tensors.items():
        module_name = name.rpartition(".")[0]
        if module_name not in fp8_modules:
            assert same_bytes(tensor, state[name].to(torch.bfloat16)), name
    assert set(tensors) == set(state) | {f"{n}.weight_scale_inv" for n in fp8_modules}


def test_config_json(trainer, plan, tmp_path):
    from transformers import AutoConfig, FineGrainedFP8Config

    out = export_checkpoint(trainer, plan, tmp_path / "ckpt")
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"] == quantization_config(plan)
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["dtype"] == "bfloat16"
    hf = AutoConfig.from_pretrained(out)
    FineGrainedFP8Config.from_dict(hf.quantization_config)
    assert hf.num_hidden_layers == 2


def test_unrewritten_model_exports_the_same_bytes(trainer, plan):
    """Sync straight from a BF16 trainer (no rewrite) goes through to_block_fp8: identical bytes."""
    plain = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=5)
    rewritten = dict(iter_rollout_weights(trainer, plan))
    for name, tensor in iter_rollout_weights(plain, plan):
        assert same_bytes(tensor, rewritten[name]), name
    w, s = to_block_fp8(plain.get_submodule("model.layers.1.mlp.down_proj").weight)
    assert same_bytes(rewritten["model.layers.1.mlp.down_proj.weight"], w)
    assert same_bytes(rewritten["model.layers.1.mlp.down_proj.weight_scale_inv"], s)


def test_sharded_checkpoint(trainer, plan, tmp_path):
    out = export_checkpoint(trainer, plan, tmp_path / "ckpt", max_shard_bytes=400_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    single = read_checkpoint(export_checkpoint(trainer, plan, tmp_path / "single"))
    sharded = read_checkpoint(out)
    assert single.keys() == sharded.keys()
    assert all(same_bytes(single[k], sharded[k]) for k in single)


def test_export_is_atomic(trainer, plan, tmp_path, monkeypatch):
    target = tmp_path / "ckpt"
    export_checkpoint(trainer, plan, target)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    with pytest.raises(UsageError, match="exists"):
        export_checkpoint(trainer, plan, target)

    def broken_config(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(hf_export, "_hf_config", broken_config)
    with pytest.raises(RuntimeError, match="disk full"):
        export_checkpoint(trainer, plan, target, overwrite=True)
    with pytest.raises(RuntimeError):
        export_checkpoint(trainer, plan, tmp_path / "fresh")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temp dirs, no half-written "fresh"
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    monkeypatch.undo()
    export_checkpoint(trainer, plan, target, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_meta_device_model_refused_before_any_write(plan, tmp_path):
    """Weights without values (a model built on the meta device) are named, not a NotImplementedError midway."""
    model = build_model("tiny-qwen3", device="meta", dtype="bf16")
    with pytest.raises(UsageError, match="meta device .*hint: load its weights"):
        export_checkpoint(model, plan, tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


def test_a_nan_weight_is_refused_before_any_write(plan, tmp_path):
    """It was written as a block of NaN FP8 bytes under a NaN scale, which `load_checkpoint` then refused."""
    model = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=5)
    apply(plan, model, "rollout")
    with torch.no_grad():
        model.model.layers[1].self_attn.q_proj.weight[3, 7] = float("inf")
    with pytest.raises(NonFiniteError, match=r"model.layers.1.self_attn.q_proj.weight: 1 of \d+ values are NaN or Inf"):
        export_checkpoint(model, plan, tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


def test_kv_scales_written_next_to_weights(trainer, tmp_path):
    kv_plan = compile_plan(load_policy("jetrl_unified_kv"), load_inventory("tiny-qwen3"))
    scales = KVScales(torch.tensor([0.01, 0.02]), torch.tensor([0.01, 0.02]))
    out = export_checkpoint(trainer, kv_plan, tmp_path / "ckpt", kv_scales=scales)
    assert json.loads((out / KV_SCALES_FILE).read_text())["model_type"] == "qwen3"
    assert torch.equal(read_sglang_kv_scales(out / KV_SCALES_FILE).k, scales.k)


def test_moe_experts_written_per_expert(tmp_path):
    """Fused experts go out under HF's per-expert names (what save_pretrained and SGLang use), gate/up split."""
    from safetensors.torch import load_file

    policy = load_policy("fp8rl_rollout_tis")
    experts = Rule(match=("re:.*mlp\\.experts",), linear=policy.rules_for("rollout")[-1].linear, label="x")
    rules = dict(policy.rule_sets)
    rules[policy.phases["rollout"]] += (experts,)
    moe_plan = compile_plan(replace(policy, rule_sets=rules), load_inventory("tiny-qwen3-moe"))
    model = build_model("tiny-qwen3-moe", device="cpu", dtype="bf16", seed=6)
    model.save_pretrained(tmp_path / "hf")
    hf_keys = set(load_file(tmp_path / "hf" / "model.safetensors"))
    apply(moe_plan, model, "rollout")
    tensors = read_checkpoint(export_checkpoint(model, moe_plan, tmp_path / "ckpt"))
    assert {k for k in tensors if not k.endswith("weight_scale_inv")} == hf_keys
    fused = model.get_submodule("model.layers.1.mlp.experts")
    gate_up = fused.quantized_weight("gate_up_proj", 5)
    rows, blocks = gate_up.data.shape[0] // 2, gate_up.scale.shape[0] // 2
    prefix = "model.layers.1.mlp.experts.5"
    assert same_bytes(tensors[f"{prefix}.gate_proj.weight"], gate_up.data[:rows])
    assert same_bytes(tensors[f"{prefix}.up_proj.weight"], gate_up.data[rows:])
    assert same_bytes(tensors[f"{prefix}.up_proj.weight_scale_inv"], gate_up.scale[blocks:])
    assert same_bytes(tensors[f"{prefix}.down_proj.weight"], fused.quantized_weight("down_proj", 5).data)
    assert tensors["model.layers.1.mlp.gate.weight"].dtype == torch.bfloat16  # the router stays bf16
    assert "model.layers.1.mlp.gate" in quantization_config(moe_plan)["ignored_layers"]


def test_reload_with_transformers(trainer, plan, tmp_path):
    """transformers' own FP8 loader (dequantizes to BF16 on a CPU-only machine) reads the checkpoint."""
    pytest.importorskip("accelerate")
    from transformers import AutoModelForCausalLM

    from precision_engine.numerics.exchange import from_block_fp8

    out = export_checkpoint(trainer, plan, tmp_path / "ckpt")
    loaded = AutoModelForCausalLM.from_pretrained(out)
    name = "model.layers.0.self_attn.q_proj"
    q = trainer.get_submodule(name).quantized_weight()
    torch.testing.assert_close(
        loaded.get_submodule(name).weight.to(torch.bfloat16), from_block_fp8(q.data, q.scale), rtol=0, atol=0
    )


def test_checkpoint_is_readable_by_other_users(trainer, plan, tmp_path):
    """The staging directory is private while written; the result gets umask-derived modes (e.g. a rollout
    server running as another user must read it)."""
    import os

    umask = os.umask(0o022)
    try:
        out = export_checkpoint(trainer, plan, tmp_path / "ckpt")
    finally:
        os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o755
    assert {path.stat().st_mode & 0o777 for path in out.iterdir()} == {0o644}


def test_export_uses_the_exported_phase_format_not_the_model_phase(plan):
    """A model rewritten for training whose rollout weights use another format (here UE8M0 pow2 scales) must
    export the rollout phase's bytes, not the train-phase Fp8Linear's cached ones."""
    from precision_engine.numerics.formats import ScaleKind
    from precision_engine.numerics.quantize import quantize_blocks

    policy = load_policy("jetrl_unified")
    train_rules = policy.rule_sets[policy.phases["train"]]
    rollout_rules = tuple(
        replace(r, linear=replace(r.linear, weight=replace(r.linear.weight, scale=ScaleKind.POW2))) if r.linear else r
        for r in train_rules
    )
    split = replace(policy, rule_sets={**policy.rule_sets, "rollout_pow2": rollout_rules},
                    phases={**policy.phases, "rollout": "rollout_pow2"})
    split_plan = compile_plan(split, load_inventory("tiny-qwen3"))
    model = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=5)
    apply(split_plan, model, "train")
    exported = dict(iter_rollout_weights(model, split_plan))
    name = "model.layers.0.self_attn.q_proj"
    expected = quantize_blocks(model.get_submodule(name).weight.detach(),
                               split_plan.phases["rollout"].by_name[name].linear.weight)
    assert same_bytes(exported[f"{name}.weight_scale_inv"], expected.scale)
    assert same_bytes(exported[f"{name}.weight"], expected.data)


def test_fp8_lm_head_refused():
    """SGLang's and transformers' FP8 loaders keep lm_head (an embedding-like layer) unquantized: FP8 bytes there
    would load as garbage, or, tied to embed_tokens, silently run in BF16."""
    from precision_engine.errors import UnsupportedError

    policy = load_policy("jetrl_unified")
    rules = policy.rule_sets[policy.phases["rollout"]]
    linear = next(r.linear for r in rules if r.linear)
    fp8_head = replace(policy, rule_sets={**policy.rule_sets, "head": (Rule(match=("lm_head",), linear=linear,
                                                                             label="head"), *rules)},
                       phases={**policy.phases, "rollout": "head"})
    head_plan = compile_plan(fp8_head, load_inventory("tiny-qwen3"))
    assert head_plan.phases["rollout"].by_name["lm_head"].is_fp8
    model = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=5)
    with pytest.raises(UnsupportedError, match="lm_head"):
        dict(iter_rollout_weights(model, head_plan))


def test_partly_fp8_fused_projections_refused():
    """SGLang loads q/k/v (and gate/up) as one fused layer and refuses a checkpoint where only some are FP8."""
    from precision_engine.errors import UnsupportedError

    policy = load_policy("jetrl_unified")
    rules = policy.rule_sets[policy.phases["rollout"]]
    keep_kv = Rule(match=("re:.*self_attn\\.(k|v)_proj",), label="kv")
    mixed = replace(policy, rule_sets={**policy.rule_sets, "mixed": (keep_kv, *rules)},
                    phases={**policy.phases, "rollout": "mixed"})
    mixed_plan = compile_plan(mixed, load_inventory("tiny-qwen3"))
    with pytest.raises(UnsupportedError, match=r"model\.layers\.0\.self_attn: only q_proj of q_proj/k_proj"):
        quantization_config(mixed_plan)
