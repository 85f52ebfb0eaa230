"""`run --resume` and `ablate` continue a run only under the policy and settings it was started with, and every
bad setting or --out is refused before the warm-up: one tiny finished run (seconds on the CPU) is the record."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from precision_engine.cli.app import EXIT_ERROR, app
from precision_engine.errors import CheckpointError, DataError, RunError, UsageError
from precision_engine.policy import load_policy
from precision_engine.rl import run as rl_run
from precision_engine.rl.run import RunConfig, ablate, run
from precision_engine.rl.runs import RunDir, check_same_run
from precision_engine.rl.trainer import GRPOConfig
from precision_engine.rl.warmup import WarmupConfig

CONFIG = RunConfig(
    steps=2, eval_every=1, checkpoint_every=1, heldout_size=8, train_size=200,
    grpo=GRPOConfig(prompts_per_step=2, samples_per_prompt=2, micro_batch_size=8),
    warmup=WarmupConfig(max_steps=8, eval_every=8, batch_size=32, target_accuracy=0.0),  # seconds, not minutes
)
POLICY = "fp8rl_rollout_tis"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-step run of POLICY under CONFIG (checkpoints at steps 1 and 2)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PRECISION_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
        return run(load_policy(POLICY), CONFIG, tmp_path_factory.mktemp("finished") / "run").path


@pytest.fixture
def copy(finished, tmp_path, tmp_path_factory, monkeypatch):
    """A fresh copy of the finished run (the tests change it); the warm-up's cache as the fixture's."""
    monkeypatch.setenv("PRECISION_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    return shutil.copytree(finished, tmp_path / "run")


@pytest.fixture
def no_warmup(monkeypatch):
    """Fail any test that reaches the warm-up: the refusals under test come before it."""

    def warmed_up_model(*args, **kwargs):
        raise AssertionError("the warm-up started before the bad input was refused")

    monkeypatch.setattr(rl_run, "warmed_up_model", warmed_up_model)


def _snapshot(run_dir) -> dict:
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir()) if p.is_file()}


def test_resume_under_another_policy_is_refused_before_the_warm_up_and_writes_nothing(copy, no_warmup):
    before = _snapshot(copy)
    with pytest.raises(UsageError) as err:
        run(load_policy("jetrl_unified"), CONFIG, copy, resume=True)
    message = str(err.value)
    assert str(copy) in message and 'policy: recorded "fp8rl_rollout_tis", given "jetrl_unified"' in message
    assert "--out" in message and "\n" not in message
    assert _snapshot(copy) == before


def test_resume_compares_the_resolved_policy_document_not_just_its_name(copy, no_warmup):
    changed = load_policy(POLICY, overrides=("kv_cache.dtype=bf16",))
    with pytest.raises(UsageError, match=r'kv_cache\.dtype: recorded "float8_e4m3", given "bf16"'):
        run(changed, CONFIG, copy, resume=True)


def test_resume_with_other_settings_names_each_with_its_flag_and_both_values(copy, no_warmup):
    config = replace(CONFIG, seed=1, mix={"sub": 1.0}, grpo=replace(CONFIG.grpo, samples_per_prompt=4))
    with pytest.raises(UsageError) as err:
        run(load_policy(POLICY), config, copy, resume=True)
    message = str(err.value)
    for expected in ("seed (--seed): recorded 0, given 1", 'mix (--mix): recorded null, given {"sub": 1.0}',
                     "grpo.samples_per_prompt (--samples): recorded 2, given 4"):
        assert expected in message
    assert "steps" not in message.split("(hint")[0]


def test_run_json_records_the_reward_backend_and_a_resume_under_another_is_refused(copy, no_warmup, monkeypatch):
    """math_verify installed between start and resume would grade the second half of the run differently."""
    recorded = json.loads((copy / "run.json").read_text())["config"]["reward"]
    assert recorded == rl_run.reward_backend()
    other = "exact" if recorded == "math_verify" else "math_verify"
    monkeypatch.setattr(rl_run, "reward_backend", lambda: other)
    with pytest.raises(UsageError, match=f"reward: recorded {recorded!r}, given {other!r}".replace("'", '"')):
        run(load_policy(POLICY), replace(CONFIG, steps=3), copy, resume=True)


def test_resume_may_raise_the_step_count_and_run_json_records_it(copy):
    resumed = run(load_policy(POLICY), replace(CONFIG, steps=3), copy, resume=True)
    with resumed.metrics() as metrics:
        assert [row["step"] for row in metrics.rows()] == [0, 1, 2, 3]
    info = json.loads((copy / "run.json").read_text())
    assert info["config"]["steps"] == 3 and info["resumed"][-1]["changed"] == {"steps": [2, 3]}


def test_the_report_of_a_resumed_run_says_so(copy):
    run(load_policy(POLICY), replace(CONFIG, steps=3), copy, resume=True)
    assert "Resumed 1 time(s), from checkpoint step(s) 2." in (copy / "report" / "summary.md").read_text()


def test_resuming_a_finished_run_is_refused_before_the_warm_up(copy, no_warmup):
    before = _snapshot(copy)
    with pytest.raises(UsageError, match="finished its 2 steps already .*larger steps \\(--steps\\)"):
        run(load_policy(POLICY), CONFIG, copy, resume=True)
    assert _snapshot(copy) == before


def test_a_run_in_use_by_another_process_is_refused(copy, no_warmup):
    with RunDir.open(copy).lock(), pytest.raises(RunError, match="in use by another process"):
        run(load_policy(POLICY), replace(CONFIG, steps=3), copy, resume=True)


def test_a_log_that_ends_before_the_checkpoint_is_refused_not_resumed(copy):
    """Rows 2.. would never be logged again: the resumed run would hold a hole (it kept going before)."""
    metrics = copy / "metrics.jsonl"
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:2]))  # steps 0 and 1
    before = _snapshot(copy)
    with pytest.raises(RunError, match="metrics.jsonl ends at step 1, but the newest checkpoint is of step 2"):
        run(load_policy(POLICY), replace(CONFIG, steps=3), copy, resume=True)
    metrics.unlink()
    with pytest.raises(RunError, match="metrics.jsonl is empty, but the newest checkpoint is of step 2"):
        run(load_policy(POLICY), replace(CONFIG, steps=3), copy, resume=True)
    assert _snapshot(copy) == {name: data for name, data in before.items() if name != "metrics.jsonl"}


def test_checkpoints_that_are_not_a_directory_are_refused_before_anything_is_dropped(copy, no_warmup):
    shutil.rmtree(copy / "checkpoints")
    (copy / "checkpoints").write_text("x")
    before = _snapshot(copy)
    with pytest.raises(CheckpointError, match="checkpoints is not a directory"):
        run(load_policy(POLICY), replace(CONFIG, steps=3), copy, resume=True)
    assert _snapshot(copy) == before


def test_a_garbled_policy_file_is_named_not_compared(copy, no_warmup):
    (copy / "policy.yaml").write_text("- a\n")
    with pytest.raises(RunError, match="policy.yaml: not a policy document"):
        run(load_policy(POLICY), replace(CONFIG, steps=3), copy, resume=True)


def test_fallback_sets_a_damaged_checkpoint_aside_and_continues_from_the_one_before(copy):
    model = copy / "checkpoints" / "step_000002" / "model.safetensors"
    model.write_bytes(model.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="--resume --fallback"):
        run(load_policy(POLICY), replace(CONFIG, steps=3), copy, resume=True)
    with pytest.raises(UsageError, match="pass it with --resume"):
        run(load_policy(POLICY), replace(CONFIG, steps=3), copy, fallback=True)
    with pytest.warns(UserWarning, match="falling back"):
        resumed = run(load_policy(POLICY), replace(CONFIG, steps=3), copy, resume=True, fallback=True)
    assert [row["step"] for row in resumed.metric_rows()] == [0, 1, 2, 3]
    assert (copy / "checkpoints" / "step_000002.corrupt").is_dir()
    assert json.loads((copy / "run.json").read_text())["resumed"][-1]["step"] == 1


def test_resume_refuses_fewer_steps_than_its_last_checkpoint(copy, no_warmup):
    with pytest.raises(UsageError, match="checkpoint at step 2.*--steps 2 or more"):
        run(load_policy(POLICY), replace(CONFIG, steps=1), copy, resume=True)


def test_a_run_recorded_before_model_dir_still_resumes_with_the_recipe_model(copy):
    """Older run.json files hold the resolved warm-up directory in `model` and no `model_dir`."""
    info = json.loads((copy / "run.json").read_text())
    info["config"]["model"] = info["config"].pop("model_dir")
    (copy / "run.json").write_text(json.dumps(info))
    run(load_policy(POLICY), replace(CONFIG, steps=3), copy, resume=True)


def test_problems_the_model_cannot_read_are_refused_before_the_warm_up(tmp_path, no_warmup):
    """A character outside the recipe model's vocabulary (row 5 of 12) or a prompt leaving no room for the response
    stopped the run at the step that drew it, after the warm-up, and again at every resume."""
    rows = [{"question": f"What is {i} plus {i}?", "answer": f"{i} + {i}\n#### {2 * i}"} for i in range(12)]
    rows[5]["question"] = "What is 5 \u20ac plus 5?"
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = replace(CONFIG, train_data=str(data), heldout_size=2)
    with pytest.raises(DataError, match="data.jsonl: problem #6 \\(\"What is 5 \u20ac.*not in its vocabulary"):
        run(load_policy(POLICY), config, tmp_path / "run")
    rows[5]["question"], rows[3]["answer"] = "What is 5 plus 5?", "3 \u20ac + 3 \u20ac\n#### 6"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(DataError, match="\u20ac.*not in its vocabulary"):  # a warm-up target of the KV calibration
        run(load_policy(POLICY), config, tmp_path / "run")
    rows[3]["answer"] = "3 + 3\n#### 6"
    rows[5]["question"] = "What is 5 plus 5?" + " Think." * 80
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(DataError, match=r"takes \d+ tokens, and with grpo.max_new_tokens \(--max-new-tokens\) 6 "
                                        r"exceeds the model's 512 positions"):
        run(load_policy(POLICY), config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_ablate_refuses_a_run_with_other_settings_before_any_run_starts(copy, no_warmup, tmp_path):
    """jetrl_unified's directory holds the fp8rl run: refused although bf16_baseline, listed first, is new."""
    out = tmp_path / "ablation"
    shutil.copytree(copy, out / "jetrl_unified")
    with pytest.raises(UsageError, match=r"ablation/jetrl_unified was started with another policy.*policy: recorded"):
        ablate([load_policy("bf16_baseline"), load_policy("jetrl_unified")], CONFIG, out)
    assert not (out / "bf16_baseline").exists() and not (out / "ablation.json").exists()


def test_ablate_refuses_a_finished_run_made_with_another_seed(copy, no_warmup, tmp_path):
    out = tmp_path / "ablation"
    shutil.copytree(copy, out / POLICY)
    with pytest.raises(UsageError, match=r"seed \(--seed\): recorded 0, given 1"):
        ablate([load_policy(POLICY), load_policy("jetrl_unified")], replace(CONFIG, seed=1), out)
    assert not (out / "ablation.json").exists()


def test_a_bad_out_is_refused_before_the_warm_up(tmp_path, no_warmup):
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(RunError, match="is not a run directory: it does not exist"):
        run(load_policy(POLICY), CONFIG, tmp_path / "missing", resume=True)
    for out in (afile, afile / "run"):
        with pytest.raises(RunError, match="exists and is not a directory"):
            run(load_policy(POLICY), CONFIG, out)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("")
    with pytest.raises(RunError, match="not empty"):
        run(load_policy(POLICY), CONFIG, tmp_path / "used")


@pytest.mark.parametrize(("grpo", "expected"), [
    ({"prompts_per_step": 0}, r"--prompts\) must be >= 1, got 0"),
    ({"prompts_per_step": -3}, r"--prompts\) must be >= 1, got -3"),
    ({"samples_per_prompt": 0}, r"--samples\) must be >= 2, got 0"),
    ({"samples_per_prompt": 1}, r"--samples\) must be >= 2, got 1 \(GRPO"),
])
def test_run_config_refuses_too_few_prompts_or_samples(grpo, expected):
    with pytest.raises(UsageError, match=expected):
        replace(CONFIG, grpo=replace(CONFIG.grpo, **grpo))


def test_run_config_names_the_cli_flags_and_bounds_the_seed():
    with pytest.raises(UsageError, match=r"eval_every \(--eval-every\) must be >= 1, got 0"):
        replace(CONFIG, eval_every=0)
    for seed in (-1, 2**63):
        with pytest.raises(UsageError, match=r"seed \(--seed\) must be in 0 \.\. 2\*\*63-1"):
            replace(CONFIG, seed=seed)
    replace(CONFIG, seed=2**63 - 1)


@pytest.mark.parametrize("verb", ["run", "ablate"])
def test_the_cli_refuses_a_seed_beyond_63_bits(verb, no_warmup):
    args = [verb, "-p", "bf16_baseline", "-p", "jetrl_unified"] if verb == "ablate" else [verb, "-p", POLICY]
    result = CliRunner().invoke(app, [*args, "--seed", "99999999999999999999"])
    assert result.exit_code == EXIT_ERROR and "Invalid value for '--seed'" in result.output


def test_the_hint_shows_the_command_the_run_last_ran_with(tmp_path):
    made = RunDir.create(tmp_path / "run", policy={"name": "p", "version": 1}, plan={}, config={"seed": 0},
                         command=["precision", "run", "--steps", "2"])
    made = made.record_resume(["precision", "run", "--steps", "5", "--resume"], step=2)
    with pytest.raises(UsageError, match="last ran with, `precision run --steps 5 --resume`"):
        check_same_run(made, policy={"name": "p", "version": 1}, config={"seed": 1})


def test_check_same_run_compares_nested_settings_and_skips_those_that_may_change(tmp_path):
    recorded = {"seed": 0, "steps": 2, "grpo": {"lr": 0.1, "loss": {"clip": 0.2}}, "policy": "p"}
    made = RunDir.create(tmp_path / "run", policy={"name": "p", "version": 1}, plan={}, config=recorded)
    same = {"seed": 0, "steps": 5, "grpo": {"lr": 0.1, "loss": {"clip": 0.2}}}
    check_same_run(made, policy={"name": "p", "version": 1, "description": "edited"}, config=same,
                   may_change=("steps",))
    with pytest.raises(UsageError, match=r"grpo\.loss\.clip: recorded 0\.2, given 0\.3; extra: recorded nothing"):
        check_same_run(made, policy={"name": "p", "version": 1},
                       config={**same, "grpo": {"lr": 0.1, "loss": {"clip": 0.3}}, "extra": 1}, may_change=("steps",))
    with pytest.raises(UsageError, match=r"version: recorded 1, given 2"):
        check_same_run(made, policy={"name": "p", "version": 2}, config=same, may_change=("steps",))


def test_the_cli_passes_fallback_and_refuses_a_mix_kind_given_twice(no_warmup, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["run", "-p", POLICY, "--out", str(tmp_path / "r"), "--fallback"])
    assert result.exit_code == EXIT_ERROR and "pass it with --resume" in result.output
    assert result.output.startswith("error:")  # no progress bar drawn above a refusal that comes before any work
    result = runner.invoke(app, ["run", "-p", POLICY, "--out", str(tmp_path / "r"), "--mix", "add=1,add=2"])
    assert result.exit_code == EXIT_ERROR and "add is given twice" in result.output


def test_an_interrupted_run_says_how_to_continue(monkeypatch, tmp_path):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(rl_run, "run", interrupted)
    result = CliRunner().invoke(app, ["run", "-p", POLICY, "--out", str(tmp_path / "r")])
    assert result.exit_code == 130 and "the same command with --resume" in result.output


def test_ablate_refuses_a_policy_named_like_a_file_it_writes_before_any_run(no_warmup, tmp_path):
    """A policy named ablation.json made its run folder there, and the comparison's write failed after every
    run (an internal IsADirectoryError)."""
    named = load_policy("bf16_baseline", overrides=("name=ablation.json",))
    with pytest.raises(UsageError, match="policy name 'ablation.json' is the name of a file ablate writes"):
        ablate([load_policy(POLICY), named], CONFIG, tmp_path / "out")
    assert not (tmp_path / "out").exists()
