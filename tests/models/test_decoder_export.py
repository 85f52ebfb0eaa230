"""Our decoder goes out through `export_checkpoint` like an HF model, and comes back into a rollout decoder
with the trainer's FP8 bytes and, under jetrl_unified on the CPU, the trainer's logits bit for bit."""

import json

import torch

from precision_engine.compile import compile_plan
from precision_engine.integrations.hf_export import export_checkpoint
from precision_engine.integrations.weight_sync import load_checkpoint
from precision_engine.models import load_inventory
from precision_engine.models.decoder import Decoder
from precision_engine.policy import load_policy
from precision_engine.rewrite import apply


def _decoder(plan, phase, seed):
    model = Decoder.from_config("tiny-qwen3", seed=seed, dtype="bf16")
    apply(plan, model, phase)
    return model


def test_decoder_exports_and_loads_back_bitwise(tmp_path):
    plan = compile_plan(load_policy("policies/jetrl_unified.yaml"), load_inventory("tiny-qwen3"))
    trainer = _decoder(plan, "train", seed=0)
    out = export_checkpoint(trainer, plan, tmp_path / "ckpt")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
    assert config["quantization_config"]["weight_block_size"] == [128, 128]
    rollout = _decoder(plan, "rollout", seed=1)  # other weights until the checkpoint lands
    loaded = load_checkpoint(rollout, out)
    assert "model.layers.0.self_attn.q_proj.weight_scale_inv" in loaded
    ids = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(trainer.eval()(ids), rollout.eval()(ids))
