"""`precision validate` and `precision schema` through typer's CliRunner: exit codes, text, JSON, torch-free."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from precision_engine.cli.app import app
from precision_engine.policy import load_schema, shipped_path, shipped_policies

ROOT = Path(__file__).parents[2]
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_all_shipped_policies_are_valid():
    paths = [str(shipped_path(name)) for name in shipped_policies()]
    result = invoke("validate", "--strict", *paths)
    assert result.exit_code == 0, result.output
    assert result.output.count(": ok\n") == len(paths)


def test_invalid_policy_prints_every_diagnostic_and_exits_1(tmp_policy):
    path = tmp_policy("bad.yaml", "version: 1\nname: bad\nkernal: auto\nrules: {}\nphases: {train: a, rollout: a}\n")
    result = invoke("validate", str(path))
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == f"{path}:3:1: error: kernal: unknown key 'kernal'; expected one of: $schema, version, " \
        "name, description, extends, formats, rules, phases, kv_cache, correction, master_weights, kernel, " \
        "numerics (hint: did you mean 'kernel'?)"
    assert lines[1].startswith(f"{path}:5:17: error: phases.train: undefined rule set 'a'")
    assert lines[2].startswith(f"{path}:5:29: error: phases.rollout: undefined rule set 'a'")
    assert lines[-1] == f"{path}: invalid: 3 error(s), 0 warning(s)"
    assert "Traceback" not in result.output


def test_warnings_fail_only_with_strict(tmp_policy):
    path = tmp_policy("warn.yaml", "name: warn\nextends: bf16_baseline\nkv_cache: {calibrate: once}\n")
    relaxed = invoke("validate", str(path))
    assert relaxed.exit_code == 0 and "warning: kv_cache.calibrate" in relaxed.output
    assert relaxed.output.splitlines()[-1] == f"{path}: ok (0 error(s), 1 warning(s))"
    strict = invoke("validate", "--strict", str(path))
    assert strict.exit_code == 1 and strict.output.splitlines()[-1].endswith("invalid: 0 error(s), 1 warning(s)")


def test_missing_file_and_bad_flag_are_usage_errors():
    missing = invoke("validate", "no_such_policy.yaml")
    assert missing.exit_code == 2 and "policy file not found: no_such_policy.yaml" in missing.output
    bad_set = invoke("validate", "jetrl_unified", "--set", "kernel")
    assert bad_set.exit_code == 2 and "--set expects KEY.PATH=VALUE" in bad_set.output
    assert invoke("validate").exit_code == 2


def test_missing_extends_target_is_a_policy_error(tmp_policy):
    path = tmp_policy("child.yaml", "name: child\nextends: ./gone.yaml\n")
    result = invoke("validate", str(path))
    assert result.exit_code == 1 and "extends target './gone.yaml' not found" in result.output


def test_set_overrides_apply_to_every_file():
    ok = invoke("validate", "fp8rl_rollout_tis", "fp8rl_rollout_mis",
                "--set", "correction.importance_sampling.threshold=3")
    assert ok.exit_code == 0, ok.output
    bad = invoke("validate", "fp8rl_rollout_tis", "--set", "correction.importance_sampling.threshold=0.5")
    assert bad.exit_code == 1
    assert bad.output.startswith("--set correction.importance_sampling.threshold=0.5: error: "
                                 "correction.importance_sampling.threshold: truncate mode needs threshold > 1")


def test_json_output(tmp_policy):
    bad = tmp_policy("bad.yaml", "name: bad\nextends: bf16_baseline\nkernel: cuda\n")
    result = invoke("validate", "--json", "jetrl_unified", str(bad))
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["valid"] is False and report["strict"] is False
    good, broken = report["files"]
    assert (good["policy"], good["valid"], good["diagnostics"]) == ("jetrl_unified", True, [])
    assert (broken["policy"], broken["errors"]) == (None, 1)
    assert broken["diagnostics"][0] == {"severity": "error", "message": broken["diagnostics"][0]["message"],
                                        "file": str(bad), "line": 3, "column": 9, "key_path": "kernel",
                                        "hint": "did you mean 'cublas'?"}


def test_schema_prints_the_shipped_schema():
    result = invoke("schema")
    assert result.exit_code == 0
    assert json.loads(result.output) == load_schema()


def test_validate_and_schema_do_not_import_torch():
    code = ("import sys; from precision_engine.cli.app import app; from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, ['validate', 'jetrl_unified', 'fp8rl_rollout_tis']); assert r.exit_code == 0; "
            "r = CliRunner().invoke(app, ['schema']); assert r.exit_code == 0; "
            "heavy = [m for m in ('torch', 'transformers', 'triton') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_model_flag_adds_model_diagnostics(tmp_path):
    clean = invoke("validate", "--json", "jetrl_unified", "-m", "tiny-llama")  # -m as in `plan` and `diff`
    assert clean.exit_code == 0, clean.output
    report = json.loads(clean.output)
    assert report["model"] == "tiny-llama" and report["files"][0]["diagnostics"] == []
    # hidden 192: the 128x128 weight blocks and 1x128 groups do not tile it
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 192, "intermediate_size": 384, "num_attention_heads": 3,
        "num_key_value_heads": 1, "num_hidden_layers": 1, "vocab_size": 256}))
    misfit = invoke("validate", "--json", "jetrl_unified", "--model", str(tmp_path))
    assert misfit.exit_code == 1, misfit.output
    (report,) = json.loads(misfit.output)["files"]
    assert report["valid"] is False and report["errors"] > 0
    assert all(d["key_path"] == "rules.unified[1].linear" for d in report["diagnostics"])


def test_unknown_model_is_a_usage_error():
    result = invoke("validate", "jetrl_unified", "--model", "tiny-lama")
    assert result.exit_code == 2 and "did you mean 'tiny-llama'?" in result.output
    assert "Traceback" not in result.output


def test_validate_of_a_misspelt_shipped_name_suggests_it_as_plan_and_diff_do():
    result = runner.invoke(app, ["validate", "jetrl_unifed"])
    assert result.exit_code == 2 and "did you mean 'jetrl_unified'?" in result.output, result.output
