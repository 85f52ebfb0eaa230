"""A source checkpoint is user input: `export` and `check` refuse one whose weights do not fill its config.json's
model (a tensor missing, more layers claimed than stored, a wrong shape, an FP8 export that lost its
quantization_config) or hold NaN, naming the directory and the tensors, where they used to run random or NaN
weights with exit 0. Clean saves, tied embeddings and FP8 exports still load. Tiny Llama, CPU, seconds."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from precision_engine.cli.app import app
from precision_engine.compile import compile_plan
from precision_engine.errors import ModelError
from precision_engine.integrations import export_checkpoint
from precision_engine.models.loader import build_model, config_spec, load_inventory, load_model, resolve_config
from precision_engine.policy import load_policy

runner = CliRunner()
FAST_CHECK = ("--seq-len", "8", "--no-decode", "--no-layers", "--samples", "0")
WEIGHTS = "model.safetensors"
UP = "model.layers.0.mlp.up_proj.weight"


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A clean tiny-llama HF directory, as the audit made it."""
    directory = tmp_path_factory.mktemp("src") / "tiny-llama"
    build_model("tiny-llama", device="cpu", dtype="bf16", seed=1).save_pretrained(directory)
    return directory


def _copy(source, tmp_path, edit_tensors=None, edit_config=None):
    damaged = tmp_path / "damaged"
    shutil.copytree(source, damaged)
    if edit_tensors is not None:
        tensors = load_file(damaged / WEIGHTS)
        edit_tensors(tensors)
        save_file(tensors, damaged / WEIGHTS, metadata={"format": "pt"})
    if edit_config is not None:
        config = json.loads((damaged / "config.json").read_text())
        edit_config(config)
        (damaged / "config.json").write_text(json.dumps(config))
    return damaged


def _cut_norm(tensors):
    tensors["model.norm.weight"] = tensors["model.norm.weight"][:-1].contiguous()


def _nan(tensors):
    tensors[UP][0, 0] = float("nan")


DAMAGE = {  # name: (edit_tensors, edit_config, what the message names)
    "a tensor missing": (lambda t: t.pop(UP), None, f"1 missing: {UP}"),
    "a layer more in config.json": (None, lambda c: c.update(num_hidden_layers=3),
                                    "9 missing: model.layers.2.input_layernorm.weight, "),
    "a tensor of the wrong shape": (_cut_norm, None, "model.norm.weight ([255] stored, [256] expected)"),
}


@pytest.mark.parametrize("verb", [("export", "-o", "OUT"), ("check", *FAST_CHECK)], ids=["export", "check"])
@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_source_whose_weights_do_not_match_its_config_is_refused(source, tmp_path, damage, verb):
    edit_tensors, edit_config, words = DAMAGE[damage]
    damaged = _copy(source, tmp_path, edit_tensors, edit_config)
    args = [str(tmp_path / "out") if arg == "OUT" else arg for arg in verb[1:]]
    result = runner.invoke(app, [verb[0], "-p", "jetrl_unified", "-m", str(damaged), *args])
    assert result.exit_code == 2, result.output
    assert f"{damaged}: its weights do not match its config.json" in result.output, result.output
    assert words in result.output and "above report" not in result.output, result.output
    assert not (tmp_path / "out").exists()


def _tied_source(tmp_path):
    config = {**resolve_config("tiny-llama"), "tie_word_embeddings": True}
    with config_spec(config) as spec:
        build_model(spec, device="cpu", dtype="bf16", seed=1).save_pretrained(tmp_path / "tied")
    assert "lm_head.weight" not in load_file(tmp_path / "tied" / WEIGHTS)
    return tmp_path / "tied"


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3-moe", "tied"])
def test_clean_saves_still_load(tmp_path, name):
    """lm_head.weight absent under tie_word_embeddings is not missing; fused MoE experts load from per-expert
    tensors."""
    if name == "tied":
        directory = _tied_source(tmp_path)
    else:
        directory = tmp_path / name
        build_model(name, device="cpu", dtype="bf16", seed=1).save_pretrained(directory)
    stored = load_file(directory / WEIGHTS)["model.embed_tokens.weight"]
    assert torch.equal(load_model(str(directory)).model.embed_tokens.weight, stored)


def test_an_fp8_export_loads_only_with_its_quantization_config(tmp_path):
    """Without quantization_config transformers read the FP8 bytes as values and dropped every weight_scale_inv."""
    plan = compile_plan(load_policy("jetrl_unified"), load_inventory("tiny-llama"))
    out = export_checkpoint(build_model("tiny-llama", device="cpu", dtype="bf16", seed=1), plan, tmp_path / "fp8")
    load_model(str(out))
    config = json.loads((out / "config.json").read_text())
    del config["quantization_config"]
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match=r"14 unexpected: model.layers.0.mlp.down_proj.weight_scale_inv, .*"
                                         r"\(11 more\)"):
        load_model(str(out))


def test_nan_weights_are_refused_by_export_and_check(source, tmp_path):
    """Export wrote a block of NaN FP8 bytes under a NaN scale; check said "bitwise: true" (NaN bytes equal NaN
    bytes) and "numerics promise holds"."""
    damaged = _copy(source, tmp_path, _nan)
    result = runner.invoke(app, ["export", "-p", "jetrl_unified", "-m", str(damaged), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert f"error: {UP}: 1 of 131072 values are NaN or Inf" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged"]
    result = runner.invoke(app, ["check", "-p", "jetrl_unified", "-m", str(damaged), *FAST_CHECK])
    assert result.exit_code == 2, result.output
    assert "error: the training forward gives" in result.output and "NaN or Inf" in result.output, result.output
    assert "promise holds" not in result.output
