"""The verl launcher's command (a dry run needs no verl): a user override may not change what the policy decides,
even where the policy leaves a key unset, and Hydra's `+` reaches verl as typed."""

import pytest

from precision_engine.errors import UsageError
from precision_engine.integrations.verl.launch import build_command
from precision_engine.policy import load_policy

MODEL = "actor_rollout_ref.model.path=meta-llama/Llama-3.1-8B"
SGLANG = "actor_rollout_ref.rollout.engine_kwargs.sglang"


def _launch(policy, *overrides):
    return build_command(load_policy(policy), "math", [MODEL, *overrides], dry_run=True)


@pytest.mark.parametrize("policy, override, message", [
    ("bf16_baseline", f"+{SGLANG}.quantization=fp8", "quantization is decided by the policy .*leaves it unset"),
    ("jetrl_unified", f"+{SGLANG}.kv_cache_dtype=fp8_e4m3", "kv_cache_dtype is decided by the policy"),
    ("jetrl_unified", "actor_rollout_ref.rollout.name=vllm", "rollout.name=vllm: .*SGLang's engine kwargs"),
    ("jetrl_unified", "actor_rollout_ref.rollout.quantization=bitsandbytes", "the policy decides the rollout's"),
    ("bf16_baseline", "actor_rollout_ref.rollout.quantization=fp8", "bf16_baseline has none"),
    ("jetrl_unified", "actor_rollout_ref.rollout.n=0", r"rollout.n must be >= 1, got 0"),
    ("jetrl_unified", "~trainer.logger", "not key=value or \\+key=value"),
    ("jetrl_unified", "actor_rollout_ref.model.path=llama-3.1-8b", "built-in architecture .*meta-llama/Llama-3.1-8B"),
])
def test_what_the_policy_decides_cannot_be_overridden(policy, override, message):
    with pytest.raises(UsageError, match=message):
        _launch(policy, override)


def test_a_users_plus_prefix_reaches_hydra_and_sglang_stays_the_engine():
    launch = _launch("jetrl_unified", "+trainer.my_new_key=1", "actor_rollout_ref.rollout.name=sglang")
    assert "+trainer.my_new_key=1" in launch.argv
    assert "actor_rollout_ref.rollout.name=sglang" in launch.argv


def test_a_run_directory_of_another_policy_or_under_a_file_is_refused(tmp_path):
    launch = build_command(load_policy("jetrl_unified"), "math", [MODEL], dry_run=True, run_dir=tmp_path / "run")
    launch.run_dir.mkdir()
    launch.files["policy"].write_text("name: bf16_baseline\n")
    with pytest.raises(UsageError, match="holds a verl run of another policy document"):
        build_command(load_policy("jetrl_unified"), "math", [MODEL], dry_run=True, run_dir=tmp_path / "run")
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="exists and is not a directory"):
        build_command(load_policy("jetrl_unified"), "math", [MODEL], dry_run=True, run_dir=tmp_path / "file" / "x")


def test_the_cli_refuses_built_in_flags_and_a_missing_verl_before_writing(tmp_path, monkeypatch):
    import importlib.util

    from typer.testing import CliRunner

    from precision_engine.cli.app import EXIT_ERROR, app

    runner = CliRunner()
    verl = ["run", "--backend", "verl", "-p", "jetrl_unified", "--out", str(tmp_path / "run")]
    result = runner.invoke(app, [*verl, "--dry-run", "--samples", "4", "--seed", "5", MODEL])
    assert result.exit_code == EXIT_ERROR and "--seed, --samples: the built-in backend's flags" in result.output
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "verl" else real(name, *a))
    result = runner.invoke(app, [*verl, MODEL])
    assert result.exit_code == EXIT_ERROR and "precision-engine[verl]" in result.output
    assert not (tmp_path / "run").exists()


def test_the_notes_say_how_the_recipes_prompts_reach_the_model_unless_the_data_is_the_users():
    """verl applies the chat template the built-in backend does not: a reader comparing the two runs needs to know."""
    (note,) = [n for n in _launch("jetrl_unified").notes if n.startswith("data:")]
    assert "'####'" in note and "chat template" in note
    own = _launch("jetrl_unified", "data.train_files=/data/train.parquet")
    assert not [n for n in own.notes if n.startswith("data:")]
