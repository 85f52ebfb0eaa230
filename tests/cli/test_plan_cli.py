"""`precision plan` and `precision diff` through the typer app."""

import json

import pytest
from typer.testing import CliRunner

from precision_engine.cli.app import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def test_plan_table_collapses_layers_and_gives_verdict():
    result = run("plan", "policies/jetrl_unified.yaml", "--model", "llama-3.1-8b")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "model.layers.{0..31}.self_attn.q_proj" in out and "x32" in out
    assert "e4m3 128x128" in out and "e4m3 1x128" in out and "e4m3 128x1" in out
    assert out.count("FP8 share of linear/expert GEMM FLOPs per token: 93.0%") == 2
    assert "IDENTICAL for all 291 modules" in out
    assert len(out.splitlines()) < 60  # readable: one row per distinct module, not 291


def test_plan_json_counts_for_llama_8b():
    result = run("plan", "jetrl_unified", "--model", "llama-3.1-8b", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for phase in ("train", "rollout"):
        modules = data["phases"][phase]["modules"]
        assert sum(m["fp8"] for m in modules) == 224
        lm_head = next(m for m in modules if m["name"] == "lm_head")
        assert lm_head["fp8"] is False and lm_head["compute"] == "bf16"
    assert data["identical"] is True


def test_plan_naive_reports_differing_modules():
    result = run("plan", "fp8_rollout_naive", "--model", "tiny-llama")
    assert result.exit_code == 0, result.output
    assert "DIFFER for 14 of 21 modules" in result.output
    assert "model.layers.{0,1}.mlp.down_proj" in result.output


def test_plan_one_phase():
    result = run("plan", "fp8_rollout_naive", "--model", "tiny-qwen3", "--phase", "rollout", "--json")
    assert list(json.loads(result.output)["phases"]) == ["rollout"]
    result = run("plan", "fp8_rollout_naive", "--model", "tiny-qwen3", "--phase", "decode")
    assert result.exit_code == 2 and "has phases train, rollout" in result.output


def test_set_override_changes_the_plan():
    base = json.loads(run("plan", "jetrl_unified", "--model", "tiny-llama", "--json").output)
    result = run("plan", "jetrl_unified", "--model", "tiny-llama", "--json", "--set", "numerics.batch_invariant=false")
    changed = json.loads(result.output)
    assert base["identical"] is True and changed["identical"] is False
    result = run("plan", "jetrl_unified", "-m", "tiny-llama", "--json", "--set", "rules.unified[1].match=[re:.*mlp.*]")
    assert result.exit_code == 0, result.output
    train = json.loads(result.output)["phases"]["train"]
    assert sorted(m["name"] for m in train["modules"] if m["fp8"]) == [
        f"model.layers.{i}.mlp.{proj}" for i in range(2) for proj in ("down_proj", "gate_proj", "up_proj")
    ]
    result = run("plan", "jetrl_unified", "--model", "tiny-llama", "--set", "phases.train=bf16")
    assert "train: FP8 share of linear/expert GEMM FLOPs per token: 0.0%" in result.output
    assert "DIFFER for 14 of 21 modules" in result.output


def test_plan_moe_keeps_router_bf16():
    data = json.loads(run("plan", "fp8rl_rollout_tis", "--model", "qwen3-30b-a3b", "--json").output)
    gate = next(m for m in data["phases"]["rollout"]["modules"] if m["name"] == "model.layers.0.mlp.gate")
    assert gate["kind"] == "router" and gate["fp8"] is False


@pytest.mark.parametrize(
    "args, code, message",
    [
        (("plan", "jetrl_unified", "--model", "llama-3.1-8"), 2, "did you mean 'llama-3.1-8b'?"),
        (("plan", "no_such_policy", "--model", "tiny-llama"), 2, "shipped policies: bf16_baseline"),
        (("plan", "jetrl_unified", "--model", "tiny-llama", "--set", "kernel=fastest"), 1, "kernel"),
        (("plan", "jetrl_unified"), 2, "--model"),
    ],
)
def test_plan_user_errors_are_one_line(args, code, message):
    result = run(*args)
    assert result.exit_code == code and message in result.output
    assert "Traceback" not in result.output


def test_diff_exit_codes():
    assert run("diff", "jetrl_unified", "policies/jetrl_unified.yaml").exit_code == 0
    different = run("diff", "fp8_rollout_naive", "jetrl_unified")
    assert different.exit_code == 1 and "~ phases.train: 'bf16' -> 'unified'" in different.output
    missing = run("diff", "jetrl_unified", "no_such_policy")
    assert missing.exit_code == 2 and "no_such_policy" in missing.output
    assert run("diff", "jetrl_unified").exit_code == 2
    assert run("diff", "jetrl_unified", "jetrl_unified", "--model", "nope").exit_code == 2


def test_diff_with_model_shows_what_the_ablation_toggles():
    result = run("diff", "fp8_rollout_naive", "jetrl_unified", "--model", "llama-3.1-8b")
    assert result.exit_code == 1
    out = result.output
    assert "train: 224 module(s) change numerics" in out and "rollout: no module changes numerics" in out
    assert "bf16 (not quantized)" in out and "-> W e4m3 128x128 · X e4m3 1x128 · dY e4m3 1x128" in out
    assert "train forward = rollout: 67/291 modules -> 291/291 modules" in out


def test_diff_json():
    result = run("diff", "jetrl_unified", "jetrl_unified_kv", "--model", "tiny-qwen3", "--json")
    data = json.loads(result.output)
    assert result.exit_code == 1 and data["same"] is False
    kv_change = {"path": "kv_cache.dtype", "kind": "changed", "old": "bf16", "new": "float8_e4m3", "metadata": False}
    assert kv_change in data["policy"]
    assert data["plan"]["phases"] == {"train": [], "rollout": []}


def test_diff_same_numerics_with_a_set_free_copy(tmp_path):
    copy = tmp_path / "mine.yaml"
    copy.write_text("version: 1\nname: mine\nextends: jetrl_unified\n")
    result = run("diff", "jetrl_unified", str(copy), "--model", "tiny-qwen3-moe")
    assert result.exit_code == 0, result.output
    assert "(metadata)" in result.output


def test_plan_reports_model_diagnostics_after_the_plan(tmp_path):
    policy = tmp_path / "tiles.yaml"
    policy.write_text(
        "version: 1\nname: tiles\nextends: jetrl_unified\n"
        "formats:\n  w8: {dtype: float8_e4m3, granularity: block, block: [128, 96], scale: fp32}\n"
    )
    result = run("plan", str(policy), "--model", "tiny-llama")
    assert result.exit_code == 1
    assert "e4m3 128x96" in result.output  # the plan is still shown
    assert "rules.unified[1].linear.weight: the FP8 GEMMs take weights in 128x128 blocks, got e4m3 128x96" in (
        result.output
    )
    data = json.loads(run("plan", str(policy), "--model", "tiny-llama", "--json").output)
    assert {d["severity"] for d in data["diagnostics"]} == {"error"}


def test_compiler_and_model_packages_import_without_torch():
    """`precision validate` shares the app: registering `plan`/`diff` must not pull in torch or transformers."""
    import subprocess
    import sys

    code = (
        "import sys, precision_engine.cli.app, precision_engine.compile, precision_engine.models;"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_diff_with_an_invalid_policy_prints_its_diagnostics_once_and_exits_2(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: broken\nextends: jetrl_unified\nkernal: auto\n")
    result = run("diff", "jetrl_unified", str(broken))
    assert result.exit_code == 2
    assert result.output.startswith(f"{broken}:3:1: error: kernal: unknown key 'kernal'"), result.output
    assert "error: error:" not in result.output and "Traceback" not in result.output


def test_plan_shows_the_policys_own_warnings(tmp_policy):
    path = tmp_policy("warn.yaml", "extends: jetrl_unified\nkv_cache: {dtype: bf16, calibrate: every_weight_update}\n")
    result = run("plan", str(path), "--model", "tiny-llama", "--json")
    assert result.exit_code == 0  # warnings do not fail a plan
    data = json.loads(result.stdout)
    assert [(d["severity"], d["key_path"]) for d in data["diagnostics"]] == [("warning", "kv_cache.calibrate")]


def test_brackets_in_the_users_text_are_printed_as_written(tmp_path, monkeypatch):
    """Rich read `[...]` as markup and dropped it: `--set ...match=[x]` printed as `...match=`, a file
    `[red]p.yaml` as `p.yaml`. The verbs' console prints text as written; only `NO` is styled (a Text)."""
    (tmp_path / "[red]p.yaml").write_text("extends: jetrl_unified\nname: p\n")
    monkeypatch.chdir(tmp_path)
    override = run("diff", "jetrl_unified", "--set", "rules.unified[0].match=[x]")
    assert override.exit_code == 1 and "match=[x]" in " ".join(override.output.split()), override.output
    named = run("diff", "[red]p.yaml", "bf16_baseline")
    assert named.exit_code == 1 and "([red]p.yaml -> bf16_baseline)" in named.output, named.output
    plan = run("plan", "fp8rl_rollout_tis", "-m", "tiny-llama", "--phase", "rollout")
    assert plan.exit_code == 0 and "= train: NO" in plan.output and "[bold red]" not in plan.output, plan.output
