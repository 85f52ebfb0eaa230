"""`precision export` never destroys what it was not asked to write, checks --out first, writes what a rollout
engine needs and nothing a policy does not have (issue 8, items 4 and 5)."""

import json
import os

import pytest
import torch
from typer.testing import CliRunner

from precision_engine.cli.app import app
from precision_engine.integrations import hf_export
from precision_engine.integrations.export_files import MANIFEST_FILE

runner = CliRunner()


def export(*args):
    return runner.invoke(app, ["export", *args])


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A tiny-llama HF directory with weights, tokenizer files and generation_config.json."""
    from precision_engine.models import build_model

    source = tmp_path_factory.mktemp("src") / "my-hf-model"
    build_model("tiny-llama", device="cpu", dtype="bf16", seed=9).save_pretrained(source)
    (source / "tokenizer.json").write_text('{"version": "1.0"}')
    (source / "tokenizer_config.json").write_text("{}")
    (source / "generation_config.json").write_text('{"temperature": 0.6}')
    return source


def _refused(result, words):
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output, result.output


def test_overwrite_never_replaces_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "notes.txt").write_text("keep")
    monkeypatch.chdir(tmp_path)
    _refused(export("-p", "jetrl_unified", "-m", "tiny-llama", "-o", ".", "--overwrite"), "working directory")
    assert (tmp_path / "notes.txt").read_text() == "keep"


def test_overwrite_never_replaces_a_file(tmp_path):
    target = tmp_path / "file.txt"
    target.write_text("keep")
    _refused(export("-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(target), "--overwrite"), "not a directory")
    assert target.read_text() == "keep"


def test_overwrite_never_replaces_the_source_model(hf_dir):
    before = sorted(p.name for p in hf_dir.iterdir())
    _refused(export("-p", "jetrl_unified", "-m", str(hf_dir), "-o", str(hf_dir), "--overwrite"), "source model")
    assert sorted(p.name for p in hf_dir.iterdir()) == before


def test_overwrite_replaces_only_an_earlier_export(tmp_path):
    other = tmp_path / "mine"
    other.mkdir()
    (other / "data.bin").write_text("keep")
    _refused(export("-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(other), "--overwrite"), MANIFEST_FILE)
    assert (other / "data.bin").read_text() == "keep"
    out = tmp_path / "ckpt"
    assert export("-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(out)).exit_code == 0
    result = export("-p", "bf16_baseline", "-m", "tiny-llama", "-o", str(out), "--overwrite")
    assert result.exit_code == 0, result.output
    assert "quantization_config" not in json.loads((out / "config.json").read_text())


def test_overwrite_never_deletes_files_the_user_added(tmp_path, hf_dir, monkeypatch):
    """NOTES.md and eval_results/ beside an earlier export were deleted with it; files the export wrote itself
    (side files, KV scales, the manifest) are replaced as before."""
    import precision_engine.pipeline as pipeline

    out = tmp_path / "ow"
    args = ("-p", "jetrl_unified_kv", "-m", str(hf_dir), "-o", str(out), "--overwrite")
    assert export(*args).exit_code == 0
    assert export(*args).exit_code == 0
    (out / "NOTES.md").write_text("keep")
    (out / "eval_results").mkdir()
    (out / "eval_results" / "gsm8k.json").write_text("{}")
    monkeypatch.setattr(pipeline, "prepare", lambda *a, **k: pytest.fail("the model was prepared first"))
    _refused(export(*args), "holds NOTES.md, eval_results/, which the earlier export did not write")
    assert "move them out" in export(*args).output
    assert (out / "NOTES.md").read_text() == "keep" and (out / "eval_results" / "gsm8k.json").is_file()


def test_out_is_checked_before_any_model_work(tmp_path, monkeypatch):
    import precision_engine.pipeline as pipeline

    def no_model_work(*args, **kwargs):
        raise AssertionError("the model was prepared before --out was checked")

    monkeypatch.setattr(pipeline, "prepare", no_model_work)
    (tmp_path / "ckpt").mkdir()
    _refused(export("-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(tmp_path / "ckpt")), "--overwrite")
    _refused(export("-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(tmp_path / ("x" * 300))), "--out")


def test_a_directory_without_weights_is_refused_unless_random_weights_are_asked_for(tmp_path, hf_dir):
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    (config_only / "config.json").write_text((hf_dir / "config.json").read_text())
    for verb in (["export", "-o", str(tmp_path / "ckpt")], ["check", "--seq-len", "8", "--no-decode",
                                                           "--no-layers"]):
        result = runner.invoke(app, [verb[0], "-p", "jetrl_unified", "-m", str(config_only), *verb[1:]])
        _refused(result, "--random-weights")
        result = runner.invoke(app, [verb[0], "-p", "jetrl_unified", "-m", str(config_only), *verb[1:],
                                     "--random-weights"])
        assert result.exit_code == 0 and "random" in result.output, result.output


def test_pytorch_bin_weights_load_safely(tmp_path, hf_dir):
    """pytorch_model.bin is read with torch.load(weights_only=True): its tensors load, a pickled callable never
    runs."""
    from precision_engine.errors import ModelError
    from precision_engine.models.loader import load_model
    from safetensors.torch import load_file

    state = load_file(hf_dir / "model.safetensors")
    good = tmp_path / "bin"
    good.mkdir()
    (good / "config.json").write_text((hf_dir / "config.json").read_text())
    torch.save(state, good / "pytorch_model.bin")
    loaded = load_model(str(good))
    assert torch.equal(loaded.model.embed_tokens.weight, state["model.embed_tokens.weight"])

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "config.json").write_text((hf_dir / "config.json").read_text())
    torch.save({"model.embed_tokens.weight": Exploit()}, evil / "pytorch_model.bin")
    with pytest.raises(ModelError, match="cannot load its weights"):
        load_model(str(evil))
    assert not (tmp_path / "pwned").exists()


def test_tokenizer_and_generation_config_are_copied(tmp_path, hf_dir):
    out = tmp_path / "ckpt"
    result = export("-p", "jetrl_unified", "-m", str(hf_dir), "-o", str(out))
    assert result.exit_code == 0, result.output
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (out / name).read_bytes() == (hf_dir / name).read_bytes()
    assert "generation_config.json" in json.loads((out / MANIFEST_FILE).read_text())["files"]


def test_bf16_baseline_exports_plain_bf16_and_loads_back(tmp_path):
    from precision_engine.compile import compile_plan
    from precision_engine.integrations import export_checkpoint, load_checkpoint
    from precision_engine.models import build_model, load_inventory
    from precision_engine.policy import load_policy
    from precision_engine.rewrite import apply

    plan = compile_plan(load_policy("bf16_baseline"), load_inventory("tiny-qwen3"))
    source = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=1)
    out = export_checkpoint(source, plan, tmp_path / "ckpt")
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    target = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=2)
    apply(plan, target, "rollout")
    load_checkpoint(target, out)
    assert all(torch.equal(a, b) for a, b in zip(source.state_dict().values(), target.state_dict().values()))


def test_no_kv_scales_without_an_fp8_kv_cache(tmp_path):
    out = tmp_path / "ckpt"
    assert export("-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(out)).exit_code == 0
    assert not (out / "kv_cache_scales.json").exists()
    ids = tmp_path / "ids.json"
    ids.write_text("[[1, 2, 3]]")
    _refused(export("-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(tmp_path / "b"), "--calibration-ids",
                    str(ids)), "no FP8 KV cache")


# ------------------------------------------------------------------------------------ the swap and the disk


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from precision_engine.compile import compile_plan
    from precision_engine.models import build_model, load_inventory
    from precision_engine.policy import load_policy
    from precision_engine.rewrite import apply

    plan = compile_plan(load_policy("jetrl_unified"), load_inventory("tiny-qwen3"))
    model = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=1)
    apply(plan, model, "rollout")
    return model, plan


def test_overwrite_swaps_in_one_step(tiny, tmp_path):
    model, plan = tiny
    out = hf_export.export_checkpoint(model, plan, tmp_path / "ckpt")
    before = out.stat().st_ino
    calls = []
    real = hf_export._exchange
    hf_export._exchange = lambda a, b: calls.append((a, b)) or real(a, b)
    try:
        hf_export.export_checkpoint(model, plan, out, overwrite=True)
    finally:
        hf_export._exchange = real
    assert calls and out.stat().st_ino != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_crash_between_the_fallback_renames_is_repaired(tiny, tmp_path, monkeypatch):
    model, plan = tiny
    out = hf_export.export_checkpoint(model, plan, tmp_path / "ckpt")
    monkeypatch.setattr(hf_export, "_exchange", lambda a, b: False)
    renames = []

    def crash_on_second(src, dst):
        renames.append(dst)
        if len(renames) == 2:
            raise KeyboardInterrupt  # killed between the two renames
        os.replace(src, dst)

    monkeypatch.setattr(hf_export.os, "rename", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        hf_export.export_checkpoint(model, plan, out, overwrite=True)
    monkeypatch.undo()
    [retired] = [p for p in tmp_path.iterdir() if ".old." in p.name]
    assert not out.exists() and (retired / "ckpt" / MANIFEST_FILE).is_file()
    retired.rename(tmp_path / ".ckpt.old.999999999.x")  # as a dead process would have left it
    hf_export.export_checkpoint(model, plan, out, overwrite=True)  # restored first, so --overwrite may replace it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_stale_staging_of_dead_exports_is_removed(tiny, tmp_path):
    model, plan = tiny
    dead = tmp_path / ".ckpt.partial.999999999.abc"
    alive = tmp_path / f".ckpt.partial.{os.getpid()}.abc"
    dead.mkdir()
    alive.mkdir()
    hf_export.export_checkpoint(model, plan, tmp_path / "ckpt")
    assert not dead.exists() and alive.exists()


def test_files_and_directories_are_fsynced(tiny, tmp_path, monkeypatch):
    model, plan = tiny
    synced = []
    real = hf_export.fsync_path
    monkeypatch.setattr(hf_export, "fsync_path", lambda p: synced.append(p.name) or real(p))
    hf_export.export_checkpoint(model, plan, tmp_path / "ckpt")
    assert {"model.safetensors", "config.json", tmp_path.name} <= set(synced)
    assert any(name.startswith(".ckpt.partial.") for name in synced)  # the staging directory itself


# ------------------------------------------------------------------------- failures leave nothing behind


def test_a_failed_export_creates_no_directories(tmp_path):
    out = tmp_path / "new" / "deep" / "ckpt"
    for args in (["-p", "no-such-policy", "-m", "tiny-llama"], ["-p", "jetrl_unified", "-m", "no-such-model"],
                 ["-p", "jetrl_unified", "-m", "tiny-llama", "--set", "rules=3"]):
        result = export(*args, "-o", str(out))
        assert result.exit_code == 2 and "internal error" not in result.output, result.output
        assert list(tmp_path.iterdir()) == [], args


def test_out_under_a_file_or_empty_is_refused(tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("keep")
    _refused(export("-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(tmp_path / "afile" / "sub" / "x")),
             f"{tmp_path / 'afile'} is not a directory")
    monkeypatch.chdir(tmp_path)
    _refused(export("-p", "jetrl_unified", "-m", "tiny-llama", "-o", ""), "--out is empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def _safetensors_disk_full(*args, **kwargs):
    from safetensors import SafetensorError

    raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


def _os_error(code):
    def write(*args, **kwargs):
        raise OSError(code, os.strerror(code))
    return write


@pytest.mark.parametrize("failure, words", [
    (_safetensors_disk_full, "no space left on the device"),
    (_os_error(28), "no space left on the device"),  # errno.ENOSPC
    (_os_error(122), "the disk quota is exceeded"),  # errno.EDQUOT on Linux
])
def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, failure, words):
    monkeypatch.setattr(hf_export, "save_file", failure)
    out = tmp_path / "new" / "ckpt"
    result = export("-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(out))
    _refused(result, f"--out {out}: {words}")
    assert "internal error" not in result.output and len(result.output.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no staging directory, no parent made for the export


@pytest.mark.parametrize("code", [30, 5, 13], ids=["EROFS", "EIO", "EACCES"])
def test_any_failed_write_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, code):
    monkeypatch.setattr(hf_export, "save_file", _os_error(code))
    out = tmp_path / "new" / "ckpt"
    result = export("-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(out))
    _refused(result, f"--out {out}: the export failed: {os.strerror(code)}; the partial export was removed")
    assert "internal error" not in result.output and len(result.output.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_keeps_the_earlier_export(tiny, tmp_path, monkeypatch):
    model, plan = tiny
    out = hf_export.export_checkpoint(model, plan, tmp_path / "ckpt")
    before = (out / "model.safetensors").read_bytes()
    monkeypatch.setattr(hf_export, "save_file", _os_error(28))
    with pytest.raises(hf_export.UsageError, match="no space left"):
        hf_export.export_checkpoint(model, plan, out, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert (out / "model.safetensors").read_bytes() == before


def test_calibration_ids_nested_too_deeply_are_one_line_errors(tmp_path):
    ids = tmp_path / "prompts.json"
    for text, words in (("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
                        ("[" * 300 + "1" + "]" * 300, "rows nested deeper than token ids"),
                        (b"\xff\xfe[[1]]", "not a readable JSON file")):
        ids.write_bytes(text if isinstance(text, bytes) else text.encode())
        result = export("-p", "jetrl_unified_kv", "-m", "tiny-llama", "-o", str(tmp_path / "ckpt"),
                        "--calibration-ids", str(ids))
        _refused(result, f"error: --calibration-ids {ids}: {words}")
        assert len(result.output.strip().splitlines()) == 1 and len(result.output) < 400, result.output
        assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.json"]
