"""`precision check` and `precision export` through typer's CliRunner."""

import json

import torch
from typer.testing import CliRunner

from precision_engine.cli.app import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_check_unified_holds(tmp_path):
    saved = tmp_path / "report.json"
    result = invoke("check", "--policy", "jetrl_unified", "--model", "tiny-llama", "--seq-len", "24",
                    "--save", str(saved))
    assert result.exit_code == 0, result.output
    assert "numerics promise holds" in result.output
    assert "17/17 module outputs bitwise equal" in result.output
    report = json.loads(saved.read_text())
    assert report["prefill"]["bitwise"] and report["prefill"]["max_abs_dlogp"] == 0.0


def test_check_naive_json_shows_mismatch():
    result = invoke("check", "-p", "fp8_rollout_naive", "-m", "tiny-qwen3", "--seq-len", "24", "--no-decode", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert not report["plan_identical"] and not report["prefill"]["bitwise"]
    assert report["prefill"]["max_abs_dlogp"] > 0 and report["decode"] is None


def test_check_bad_flags_are_one_line_errors():
    result = runner.invoke(app, ["check", "-p", "jetrl_unified", "-m", "tiny-llama", "--device", "tpu"])
    assert result.exit_code == 2 and "error: device 'tpu'" in result.output
    result = runner.invoke(app, ["check", "-p", "jetrl_unified", "-m", "tiny-llama", "--seq-len", "8",
                                 "--prompt-len", "8"])
    assert result.exit_code == 2 and "--prompt-len" in result.output
    result = runner.invoke(app, ["check", "-p", "jetrl_unified", "-m", "no-such-model"])
    assert result.exit_code == 2 and "unknown model" in result.output  # 1 would say "promise broken"


def test_export_writes_checkpoint_with_kv_scales(tmp_path):
    ids = tmp_path / "prompts.json"
    ids.write_text(json.dumps([[1, 2, 3, 4, 5, 6], [7, 8, 9]]))
    out = tmp_path / "ckpt"
    result = invoke("export", "-p", "jetrl_unified_kv", "-m", "tiny-llama", "-o", str(out),
                    "--calibration-ids", str(ids))
    assert result.exit_code == 0, result.output
    assert (out / "model.safetensors").is_file() and (out / "kv_cache_scales.json").is_file()
    assert json.loads((out / "config.json").read_text())["quantization_config"]["quant_method"] == "fp8"
    assert "random weights" in result.output
    again = runner.invoke(app, ["export", "-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(out)])
    assert again.exit_code == 2 and "--overwrite" in again.output


def test_export_from_hf_directory_loads_its_weights(tmp_path):
    from precision_engine.integrations.hf_export import read_checkpoint
    from precision_engine.models import build_model

    source = tmp_path / "hf"
    model = build_model("tiny-llama", device="cpu", dtype="bf16", seed=9)
    model.save_pretrained(source)
    result = invoke("export", "-p", "jetrl_unified", "-m", str(source), "-o", str(tmp_path / "ckpt"))
    assert result.exit_code == 0, result.output
    assert "random weights" not in result.output
    exported = read_checkpoint(tmp_path / "ckpt")["model.embed_tokens.weight"]
    assert torch.equal(exported.view(torch.uint8), model.model.embed_tokens.weight.detach().view(torch.uint8))


def test_check_runs_on_checkpoint_weights(tmp_path):
    from precision_engine.models import build_model

    build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=11).save_pretrained(tmp_path / "hf")
    result = invoke("check", "-p", "jetrl_unified", "-m", str(tmp_path / "hf"), "--seq-len", "16", "--no-decode")
    assert result.exit_code == 0, result.output
    assert "checkpoint weights" in result.output and "numerics promise holds" in result.output


def test_export_bad_calibration_ids_are_one_line_errors(tmp_path):
    ids = tmp_path / "prompts.json"
    for rows in ([[1, 2, "three"]], [[1, 2, 10**6]], [[1, -2]], [[1.5, 2]], [[1, None]], [[True]]):
        ids.write_text(json.dumps(rows))
        result = runner.invoke(app, ["export", "-p", "jetrl_unified_kv", "-m", "tiny-llama", "-o",
                                     str(tmp_path / "ckpt"), "--calibration-ids", str(ids)])
        assert result.exit_code == 2 and "error: --calibration-ids" in result.output, (rows, result.output)
        assert not (tmp_path / "ckpt").exists()
