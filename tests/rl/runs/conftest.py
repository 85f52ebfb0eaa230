"""Synthetic runs for the report and ablation tests: a run directory and a metrics.jsonl, no trainer."""

import math

import pytest

from precision_engine.rl.runs import RunDir


def _synthetic_rows(steps: int, *, gain: float, kl: float, eval_every: int = 5, corrected: bool = True) -> list[dict]:
    rows = []
    for step in range(1, steps + 1):
        row = {
            "step": step,
            "reward/mean": 0.2 + gain * step / steps,
            "rollout_corr/kl": kl * (1 + 0.1 * math.sin(step)),
            "mismatch/max_abs_dlogp": 10 * kl,
            "throughput/tokens_per_s": 1000.0 + step,
            "time/step_s": 0.5,
        }
        if corrected:
            row["rollout_corr/rollout_is_ratio_fraction_high"] = 0.01 * (step % 3)
        if step % eval_every == 0 or step == 1:
            row["heldout/accuracy"] = 0.3 + gain * step / steps
        rows.append(row)
    return rows


@pytest.fixture
def synthetic_rows():
    """synthetic_rows(steps, gain=, kl=) -> metric rows whose accuracy and reward rise by `gain`."""
    return _synthetic_rows


@pytest.fixture
def make_run(tmp_path):
    """make_run(name, rows, config=...) -> RunDir with those metric rows."""

    def make(name: str, rows: list[dict], config: dict | None = None) -> RunDir:
        run = RunDir.create(tmp_path / name, policy={"name": name, "version": 1}, plan={"modules": []},
                            command=["precision", "run", "--policy", name], config=config or {"seed": 0})
        with run.metrics() as log:
            for row in rows:
                log.append(row)
        return run

    return make
