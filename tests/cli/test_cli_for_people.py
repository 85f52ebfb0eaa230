"""The CLI as a new user meets it (issue 8, item 7): one line instead of a traceback, JSON errors under --json,
a plan that fits 80 columns, --version, honest help, --policy everywhere, diff --set, quiet transformers, and
check refusing a model that cannot fit in memory before loading it."""

import json
import os
import sys

import pytest
from typer.testing import CliRunner

from precision_engine import __version__
from precision_engine.cli.app import app, unwrap_help

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def test_without_the_torch_extra_one_line_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails as if it were not installed
    result = run("plan", "jetrl_unified", "--model", "tiny-llama")
    assert result.exit_code == 2
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert "pip install 'precision-engine[torch]'" in result.output


def test_json_prints_an_error_object_on_failure():
    result = run("plan", "jetrl_unified", "--model", "no-such-model", "--json")
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["type"] == "ModelError" and error["exit_code"] == 2 and "no-such-model" in error["message"]
    result = run("check", "-p", "jetrl_unified", "-m", "tiny-llama", "--device", "tpu", "--json")
    assert json.loads(result.stdout)["error"]["message"].startswith("error: device 'tpu'")


def test_the_plan_fits_80_columns_and_wide_shows_the_table():
    result = run("plan", "jetrl_unified", "--model", "llama-3.1-8b")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in result.output
    assert "model.layers.{0..31}.self_attn.q_proj x32" in result.output
    assert "W e4m3 128x128 · X e4m3 1x128 · dY e4m3 1x128 · wgrad e4m3 128x1" in result.output
    wide = run("plan", "jetrl_unified", "--model", "llama-3.1-8b", "--wide")
    assert "grad_output" in wide.output and "= rollout" in wide.output


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and result.output.strip() == f"precision-engine {__version__}"


def test_top_level_help_names_only_verbs_that_exist():
    group = typer_group()
    summary = app.info.help
    named = [word.strip(",.;:") for word in summary.split(":", 1)[1].split()]
    verbs = [w for w in named if w.islower() and w.isalpha() and w not in ("and", "them", "on", "a", "model",
                                                                                "policies")]
    assert verbs and all(v in group.commands for v in verbs), verbs
    assert "apply" not in summary


def typer_group():
    import typer.main

    return typer.main.get_group(app)


def test_plan_and_diff_take_policy_options_and_diff_takes_set():
    assert run("plan", "--policy", "jetrl_unified", "-m", "tiny-llama").exit_code == 0
    assert run("diff", "--policy", "jetrl_unified", "--policy", "jetrl_unified").exit_code == 0
    assert run("diff", "jetrl_unified", "-p", "bf16_baseline").exit_code == 1
    changed = run("diff", "jetrl_unified", "--set", "numerics.batch_invariant=false", "--json")
    assert changed.exit_code == 1, changed.output
    assert "batch_invariant" in changed.output
    same = run("diff", "jetrl_unified", "jetrl_unified", "--set", "description=other")
    assert same.exit_code == 0, same.output
    bad = run("plan", "jetrl_unified", "--policy", "bf16_baseline", "-m", "tiny-llama")
    assert bad.exit_code == 2 and "expected 1 policies" in bad.output


def test_help_has_no_hard_line_breaks_inside_paragraphs():
    assert unwrap_help("One sentence\n    broken here.\n\n    Examples:\n\n      a\n      b\n") == (
        "One sentence broken here.\n\nExamples:\n\n  a\n  b")
    for command in typer_group().commands.values():
        for paragraph in (command.help or "").split("\n\n"):
            if not any(line.startswith(" ") for line in paragraph.splitlines()):
                assert "\n" not in paragraph, (command.name, paragraph)


def test_transformers_stays_quiet():
    run("plan", "jetrl_unified", "-m", "tiny-llama")
    from transformers.utils import logging

    assert logging.get_verbosity() == logging.ERROR
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    assert not logging.is_progress_bar_enabled()


def test_check_on_a_cpu_refuses_a_model_too_large_before_loading(monkeypatch):
    from precision_engine.cli import model as model_verbs
    from precision_engine.models import loader

    monkeypatch.setattr(model_verbs, "_available_memory", lambda: 4 * 2**30)
    monkeypatch.setattr(loader, "load_model", lambda *a, **k: pytest.fail("loaded before the memory check"))
    result = run("check", "-p", "jetrl_unified", "-m", "llama-3.1-8b")
    assert result.exit_code == 2
    assert "needs about 2" in result.output and "4.0 GiB is available" in result.output  # ~22 GiB: 8B in bf16

