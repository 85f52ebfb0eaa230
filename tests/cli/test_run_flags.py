"""`precision run` / `ablate` pass the rollouts' length and sampling to the run, default the length by model
(a user's HF model reasons for hundreds of tokens, the recipe's own answers in a few) and refuse bad values before
any work."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

import precision_engine.rl.run as rl_run
from precision_engine.cli.app import EXIT_ERROR, app


@pytest.fixture()
def configs(monkeypatch):
    """The RunConfig each invocation hands to the run (nothing trains)."""
    seen = []

    def fake_run(policy, config, out, **_):
        seen.append(config)
        raise KeyboardInterrupt  # the CLI's exit path for an interrupted run: no report to print

    monkeypatch.setattr(rl_run, "run", fake_run)
    return seen


def _run(tmp_path, *flags):
    return CliRunner().invoke(app, ["run", "-p", "jetrl_unified", "--out", str(tmp_path / "run"), *flags])


def test_the_flags_reach_the_trainer_config(tmp_path, configs):
    _run(tmp_path, "--max-new-tokens", "40", "--temperature", "0.7", "--top-p", "0.9", "--top-k", "20")
    (grpo,) = [c.grpo for c in configs]
    assert (grpo.max_new_tokens, grpo.temperature, grpo.top_p, grpo.top_k) == (40, 0.7, 0.9, 20)


def test_the_response_length_defaults_by_model(tmp_path, configs):
    model = tmp_path / "model"
    model.mkdir()
    _run(tmp_path)
    _run(tmp_path, "--model", str(model))
    assert [c.grpo.max_new_tokens for c in configs] == [rl_run.RECIPE_MODEL_MAX_NEW_TOKENS,
                                                        rl_run.HF_MODEL_MAX_NEW_TOKENS]
    assert rl_run.HF_MODEL_MAX_NEW_TOKENS >= 256  # GSM8K reasoning; the recipe's 6 would cut every answer off


@pytest.mark.parametrize(("flags", "message"), [
    (["--max-new-tokens", "0"], r"--max-new-tokens\) must be >= 1, got 0"),
    (["--temperature", "0"], r"--temperature\) must be > 0 \(GRPO's advantage"),
    (["--temperature", "-1"], r"temperature must be a finite number >= 0, got -1.0 \(the rollouts' sampling"),
    (["--top-p", "0"], r"top_p must be in \(0, 1\], got 0.0"),
    (["--top-k", "-5"], r"top_k must be"),
])
def test_bad_sampling_is_refused_before_any_work(tmp_path, configs, flags, message):
    result = _run(tmp_path, *flags)
    assert result.exit_code == EXIT_ERROR and not configs
    assert re.search(message, " ".join(result.output.split())), result.output
    assert not (tmp_path / "run").exists()


def test_ablate_takes_them_too(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(rl_run, "ablate", lambda policies, config, out, **_: seen.append(config) or [])
    result = CliRunner().invoke(app, ["ablate", "-p", "bf16_baseline", "-p", "jetrl_unified", "--out",
                                      str(tmp_path / "ablation"), "--max-new-tokens", "12", "--top-k", "5"])
    assert result.exit_code == 0, result.output
    assert (seen[0].grpo.max_new_tokens, seen[0].grpo.top_k) == (12, 5)


def test_verl_takes_its_own_keys_for_them(tmp_path):
    result = CliRunner().invoke(app, ["run", "--backend", "verl", "-p", "jetrl_unified", "--dry-run",
                                      "--max-new-tokens", "64", "--temperature", "0.5"])
    assert result.exit_code == EXIT_ERROR
    assert "--max-new-tokens, --temperature: the built-in backend's flags" in result.output
    assert "data.max_response_length" in " ".join(result.output.split())
