"""The built-in run end to end, shortened: GRPO steps under the shipped policies, the run directory, resume after
kill -9, the report and the ablation table. A few seconds per run on the CPU (tiny warm-up, 2-layer model)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from precision_engine.errors import RunError, UsageError
from precision_engine.models.decoder import load_decoder
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.quantize import quantize_blocks
from precision_engine.pipeline import prepare
from precision_engine.policy import load_policy
from precision_engine.rl.recipes.math import MathRecipe, load_tokenizer
from precision_engine.rl.run import DataOrder, RunConfig, ablate, run
from precision_engine.rl.runs import RunDir, list_checkpoints
from precision_engine.rl.trainer import GRPOConfig, GRPOTrainer
from precision_engine.rl.warmup import WarmupConfig, warmed_up_model

TINY = RunConfig(
    steps=4, eval_every=2, checkpoint_every=2, heldout_size=24, train_size=400,
    grpo=GRPOConfig(prompts_per_step=4, samples_per_prompt=4, micro_batch_size=8),
    warmup=WarmupConfig(max_steps=30, eval_every=30, batch_size=64, target_accuracy=0.0),
)
NONDETERMINISTIC = ("time/", "throughput/")  # wall-clock measurements; everything else repeats exactly


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRECISION_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def _rows(run_dir) -> list[dict]:
    with RunDir.open(run_dir).metrics() as metrics:
        return metrics.rows()


def _deterministic(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(NONDETERMINISTIC)}


@pytest.mark.parametrize("policy", ["jetrl_unified", "jetrl_unified_kv", "bf16_baseline"])
def test_identical_numerics_give_zero_mismatch_every_step(policy, tmp_path):
    """Batch-invariant unified policies: the trainer's logprobs are the rollout's, bit for bit, every step."""
    run_dir = run(load_policy(policy), TINY, tmp_path / "run")
    rows = _rows(run_dir)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert "heldout/accuracy" in rows[0] and "heldout/accuracy" in rows[2] and "heldout/accuracy" in rows[4]
    for row in rows[1:]:
        assert row["mismatch/max_abs_dlogp"] == 0.0 and row["mismatch/bitwise_equal_fraction"] == 1.0
        assert row["rollout_corr/kl"] == 0.0
    assert {p.name for p in (run_dir.report_dir).glob("*.png")} >= {"reward.png", "heldout_accuracy.png"}
    assert (run_dir.report_dir / "summary.md").is_file()
    assert (run_dir.path / "policy.yaml").is_file() and (run_dir.path / "plan.json").is_file()


def test_fp8_rollout_shows_its_mismatch_and_tis_reports_what_it_truncates(tmp_path):
    naive = _rows(run(load_policy("fp8_rollout_naive"), TINY, tmp_path / "naive"))
    assert all(r["mismatch/max_abs_dlogp"] > 0 for r in naive[1:])
    tis = _rows(run(load_policy("fp8rl_rollout_tis"), TINY, tmp_path / "tis"))
    assert all(r["mismatch/max_abs_dlogp"] > 0 for r in tis[1:])
    assert all("rollout_corr/rollout_is_mean" in r for r in tis[1:])
    assert all(0 <= r["mismatch/corrected_fraction"] <= 1 for r in tis[1:])


def test_a_step_with_something_to_reinforce_moves_the_weights_and_the_fp8_caches_follow():
    """Rewards that differ within a group give nonzero advantages: the update changes the master weights, and
    the FP8 weight bytes the next rollout multiplies are Q(new weights), not the cached Q(old weights)."""
    recipe = MathRecipe(seed=0, train_size=400, heldout_size=24)
    model_dir = str(warmed_up_model(recipe, seed=0, config=TINY.warmup))
    policy = load_policy("jetrl_unified")
    ready = prepare(policy, model_dir, phase="rollout", dtype="bf16", loader=load_decoder)
    by_length = lambda text, answer: float(len(text) % 2)  # noqa: E731 (a reward with variance in every group)
    trainer = GRPOTrainer(ready.model, ready.plan, load_tokenizer(model_dir), by_length, TINY.grpo)
    fp8 = next(m for m in ready.model.modules() if isinstance(m, Fp8Linear))
    stale = fp8.quantized_weight().data.clone()
    before = {k: v.clone() for k, v in ready.model.state_dict().items()}
    metrics = trainer.step(recipe.train[:4], seed=0)
    assert metrics["reward/std"] > 0 and metrics["mismatch/max_abs_dlogp"] == 0.0
    assert any(not torch.equal(before[k], v) for k, v in ready.model.state_dict().items())
    fresh = quantize_blocks(fp8.weight.detach(), fp8.spec.weight).data
    assert torch.equal(fp8.quantized_weight().data, fresh) and not torch.equal(fresh, stale)


def test_resume_after_kill_9_loses_and_duplicates_no_row_and_ends_with_the_same_weights(tmp_path):
    """A child runs 8 steps, is SIGKILLed after step 5's row; --resume continues from checkpoint 4. The rows and
    the final weights equal an uninterrupted run's (timings aside). About 30 s on 2 cores."""
    config = replace(TINY, steps=8, eval_every=4, checkpoint_every=2)
    whole = run(load_policy("jetrl_unified"), config, tmp_path / "whole")
    killed = tmp_path / "killed"
    script = (
        "import sys; from dataclasses import replace\n"
        "from precision_engine.policy import load_policy\n"
        "from precision_engine.rl.run import run\n"
        "from tests_rl_config import CONFIG\n"
        f"run(load_policy('jetrl_unified'), CONFIG, {str(killed)!r})\n"
    )
    (tmp_path / "tests_rl_config.py").write_text(
        "from dataclasses import replace\nfrom test_run import TINY\n"
        "CONFIG = replace(TINY, steps=8, eval_every=4, checkpoint_every=2)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).parent),
                                                        os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", script], env=env)
    metrics = killed / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and child.poll() is None:
        if metrics.is_file() and metrics.read_text().count("\n") >= 6:  # rows 0..5 written
            break
        time.sleep(0.05)
    assert child.poll() is None, "the child finished before it could be killed"
    child.send_signal(signal.SIGKILL)
    child.wait()
    resumed = run(load_policy("jetrl_unified"), config, killed, resume=True)
    rows, expected = _rows(resumed), _rows(whole)
    assert [r["step"] for r in rows] == list(range(9))
    assert [_deterministic(r) for r in rows] == [_deterministic(r) for r in expected]
    final = load_file(str(list_checkpoints(resumed)[-1] / "model.safetensors"))
    reference = load_file(str(list_checkpoints(whole)[-1] / "model.safetensors"))
    assert final.keys() == reference.keys() and all(torch.equal(final[k], reference[k]) for k in final)


def test_a_corrupted_checkpoint_is_a_clear_error_on_resume(tmp_path):
    run_dir = run(load_policy("bf16_baseline"), TINY, tmp_path / "run")
    latest = list_checkpoints(run_dir)[-1] / "model.safetensors"
    latest.write_bytes(latest.read_bytes()[:100])
    with pytest.raises(RunError, match="model.safetensors"):
        run(load_policy("bf16_baseline"), replace(TINY, steps=6), run_dir.path, resume=True)


def test_a_new_run_refuses_a_used_directory(tmp_path):
    run(load_policy("bf16_baseline"), replace(TINY, steps=1), tmp_path / "run")
    with pytest.raises(RunError, match="--resume"):
        run(load_policy("bf16_baseline"), replace(TINY, steps=1), tmp_path / "run")


def test_ablate_writes_one_table_and_skips_finished_runs(tmp_path):
    config = replace(TINY, steps=2, eval_every=2)
    policies = [load_policy("fp8_rollout_naive"), load_policy("jetrl_unified")]
    written = ablate(policies, config, tmp_path)
    table = json.loads((tmp_path / "ablation.json").read_text())
    assert [r["policy"] for r in table["runs"]] == ["fp8_rollout_naive", "jetrl_unified"]
    assert any(p.name == "ablation.md" for p in written)
    logs = []
    ablate(policies, config, tmp_path, log=logs.append)
    assert sum("not run again" in line for line in logs) == 2
    with pytest.raises(UsageError, match="distinct"):
        ablate([policies[0], policies[0]], config, tmp_path / "again")


def test_data_order_visits_every_problem_once_per_epoch_and_resumes_where_it_was():
    order = DataOrder(10, seed=3)
    first = order.take(7)
    state = order.state()
    rest = order.take(8)
    assert sorted(first + rest[:3]) == list(range(10))
    assert DataOrder.from_state(state, 10, seed=3).take(8) == rest
    assert DataOrder(10, seed=3).take(7) == first and DataOrder(10, seed=4).take(7) != first


def test_run_config_refuses_nonsense():
    with pytest.raises(UsageError, match="recipe"):
        RunConfig(recipe="code")
    with pytest.raises(UsageError, match="steps"):
        RunConfig(steps=0)
