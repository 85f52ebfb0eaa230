"""The run directory: what it records, and that it never silently reuses or adopts a directory."""

import json

import pytest
import yaml

from precision_engine.errors import RunError
from precision_engine.policy import load_policy
from precision_engine.rl.runs import RunDir
from precision_engine.rl.runs.run_dir import RUN_FORMAT


def test_create_records_policy_plan_command_and_versions(tmp_path):
    policy = load_policy("jetrl_unified")
    run = RunDir.create(tmp_path / "run", policy=policy, plan={"phases": ["train"], "modules": [{"name": "x"}]},
                        command=["precision", "run", "--policy", "my policy.yaml"], config={"seed": 3})

    assert yaml.safe_load(run.policy_path.read_text()) == json.loads(json.dumps(dict(policy.resolved)))
    assert json.loads(run.plan_path.read_text())["modules"] == [{"name": "x"}]
    info = json.loads((run.path / "run.json").read_text())
    assert info["policy"] == "jetrl_unified" and info["config"] == {"seed": 3}
    assert info["command_line"] == "precision run --policy 'my policy.yaml'"
    for package in ("python", "torch", "triton", "transformers", "precision-engine", "git_commit"):
        assert package in info["versions"]
    assert info["versions"]["torch"]
    assert run.checkpoints_dir.is_dir()
    assert not list(run.path.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_create_refuses_a_non_empty_directory(tmp_path):
    run = RunDir.create(tmp_path / "run", policy={"name": "p"}, plan={}, command=["x"])
    with pytest.raises(RunError, match="not empty.*--resume"):
        RunDir.create(run.path, policy={"name": "p"}, plan={}, command=["x"])
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(RunError, match="not empty.*empty --out"):
        RunDir.create(other, policy={"name": "p"}, plan={}, command=["x"])
    assert (other / "notes.txt").read_text() == "mine"


def test_open_requires_a_run_directory_we_wrote(tmp_path):
    with pytest.raises(RunError, match="does not exist"):
        RunDir.open(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(RunError, match="has no run.json"):
        RunDir.open(tmp_path / "plain")
    (tmp_path / "plain" / "run.json").write_text('{"format": "something-else"}')
    with pytest.raises(RunError, match="not written by precision-engine"):
        RunDir.open(tmp_path / "plain")
    for key, value, kind in (("config", 5, "object"), ("resumed", 5, "array"), ("versions", [], "object")):
        (tmp_path / "plain" / "run.json").write_text(json.dumps({"format": RUN_FORMAT, key: value}))
        with pytest.raises(RunError, match=f"run.json: '{key}' must be a JSON {kind}"):
            RunDir.open(tmp_path / "plain")


def test_record_resume_appends_to_run_json(tmp_path):
    run = RunDir.create(tmp_path / "run", policy={"name": "p"}, plan={}, command=["precision", "run"])
    run.record_resume(["precision", "run", "--resume"], step=20)
    reopened = RunDir.open(run.path)
    assert reopened.info["resumed"][0]["step"] == 20
    assert reopened.info["resumed"][0]["command_line"] == "precision run --resume"
    assert reopened.policy_name == "p"
