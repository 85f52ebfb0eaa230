"""`write_ablation`: one table (markdown and JSON) and overlaid plots for runs that differ in policy."""

import json
import re

from precision_engine.rl.runs import write_ablation


def test_ablation_table_and_plots_from_two_runs(synthetic_rows, make_run, tmp_path):
    base = make_run("bf16_baseline", synthetic_rows(20, gain=0.1, kl=0.0, corrected=False))
    tis = make_run("fp8rl_rollout_tis", synthetic_rows(20, gain=0.25, kl=0.02))
    written = write_ablation([base, tis.path], tmp_path / "ablation")
    assert [p.name for p in written] == ["ablation.json", "ablation_accuracy.png", "ablation_mismatch.png",
                                         "ablation_reward.png", "ablation.md"]

    table = json.loads((tmp_path / "ablation" / "ablation.json").read_text())
    assert table["config_differs"] == {}
    first, second = table["runs"]
    assert (first["policy"], second["policy"]) == ("bf16_baseline", "fp8rl_rollout_tis")
    assert first["delta_accuracy_last"] == 0.0
    assert abs(second["delta_accuracy_last"] - 0.15) < 1e-12 and abs(second["accuracy_best"] - 0.55) < 1e-12
    assert second["kl_max"] > second["kl_mean"] > 0 and first["kl_max"] == 0.0
    assert "corrected_mean" in second and "corrected_mean" not in first

    markdown = (tmp_path / "ablation" / "ablation.md").read_text()
    assert "deltas against bf16_baseline" in markdown
    assert "| policy | final acc | best acc | delta final |" in markdown
    assert "| fp8rl_rollout_tis | 0.55 | 0.55 | +0.15 |" in markdown
    assert "![ablation_accuracy](ablation_accuracy.png)" in markdown
    table = [line for line in markdown.splitlines() if line.startswith("|")]  # a bare | would add a cell
    assert len({len(re.findall(r"(?<!\\)\|", line)) for line in table}) == 1 and "max\\|dlogp\\| mean" in table[0]


def test_ablation_says_when_runs_differ_in_more_than_the_policy(synthetic_rows, make_run, tmp_path):
    a = make_run("a", synthetic_rows(5, gain=0.1, kl=0.0), config={"seed": 0, "steps": 5})
    b = make_run("b", synthetic_rows(5, gain=0.1, kl=0.0), config={"seed": 1, "steps": 5})
    write_ablation([a, b], tmp_path / "out")
    assert "these settings differ between the runs: seed = [0, 1]" in (tmp_path / "out" / "ablation.md").read_text()
