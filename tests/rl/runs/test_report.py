"""`write_report`: PNGs and summary.md from a metrics.jsonl; missing metrics are skipped, not fatal."""

import re
import sys

import pytest

from precision_engine.errors import RunError, UnsupportedError
from precision_engine.rl.runs import write_report

PNG = b"\x89PNG\r\n\x1a\n"


def test_report_writes_every_plot_and_the_summary(synthetic_rows, make_run):
    run = make_run("jetrl_unified", synthetic_rows(20, gain=0.2, kl=0.01))
    written = write_report(run)
    names = [path.name for path in written]
    assert names == ["reward.png", "heldout_accuracy.png", "mismatch.png", "fraction_corrected.png",
                     "throughput.png", "summary.md"]
    assert all(path.parent == run.report_dir for path in written)
    assert all(path.read_bytes().startswith(PNG) for path in written[:-1])
    summary = (run.report_dir / "summary.md").read_text()
    assert "# Run report: jetrl_unified" in summary
    assert "| held-out accuracy, first | 0.31 |" in summary  # step 1
    assert "| held-out accuracy, last | 0.5 |" in summary  # step 20
    assert "| held-out accuracy, best | 0.5 (step 20) |" in summary
    assert "| throughput, tokens/s (mean) | 1010 |" in summary
    assert "| training time, s (sum of step times) | 10 |" in summary
    assert "rollout_is_ratio_fraction_high, mean" in summary
    assert "![mismatch](mismatch.png)" in summary


def test_report_skips_metrics_the_run_never_logged(make_run, tmp_path):
    run = make_run("bf16_baseline", [{"step": s, "reward/mean": s / 10} for s in range(1, 6)])
    written = write_report(run, tmp_path / "elsewhere")
    assert [path.name for path in written] == ["reward.png", "summary.md"]
    summary = written[-1].read_text()
    assert "reward, first -> last | 0.1 -> 0.5" in summary and "accuracy" not in summary


def test_the_summary_counts_the_updates_a_non_finite_gradient_skipped(make_run):
    rows = [{"step": s, "reward/mean": 0.5, "actor/skipped_update": float(s in (2, 4))} for s in range(1, 6)]
    run = make_run("skipping", rows)
    write_report(run)
    assert "| updates skipped (non-finite gradient) | 2 |" in (run.report_dir / "summary.md").read_text()


def test_report_of_an_empty_log_still_writes_a_summary(make_run):
    run = make_run("empty", [])
    run.metrics_path.write_text("")
    assert [path.name for path in write_report(run)] == ["summary.md"]


def test_report_refuses_a_run_without_a_log_or_with_something_else_in_place(synthetic_rows, make_run):
    """Not a summary of "0 rows" (exit 0), not an IsADirectoryError or FileExistsError."""
    run = make_run("gone", [])
    with pytest.raises(RunError, match="metrics.jsonl is missing"):
        write_report(run)
    run.metrics_path.mkdir()
    with pytest.raises(RunError, match="metrics.jsonl is not a file"):
        write_report(run)
    run.metrics_path.rmdir()
    run = make_run("blocked", synthetic_rows(3, gain=0.1, kl=0.0))
    run.report_dir.write_text("")
    with pytest.raises(RunError, match="report exists and is not a directory"):
        write_report(run)


def test_report_reads_without_writing_and_drops_its_own_stale_plots(synthetic_rows, make_run):
    """A torn last line (a run still writing, or killed) stays for the run to repair; a plot of a metric the
    log no longer holds goes, other files in report/ stay."""
    run = make_run("p", synthetic_rows(3, gain=0.1, kl=0.01))
    write_report(run)
    (run.report_dir / "notes.txt").write_text("mine")
    run.metrics_path.write_text('{"step": 1, "reward/mean": 0.5}\n{"step": 2, "rew')
    before = run.metrics_path.read_bytes()
    written = write_report(run)
    assert run.metrics_path.read_bytes() == before
    assert [path.name for path in written] == ["reward.png", "summary.md"]
    assert sorted(path.name for path in run.report_dir.iterdir()) == ["notes.txt", "reward.png", "summary.md"]


def test_summary_cells_with_a_bar_stay_one_cell(synthetic_rows, make_run):
    """`max |d logp|` unescaped split its row in two and dropped the numbers."""
    summary = write_report(make_run("p", synthetic_rows(3, gain=0.1, kl=0.01)))[-1].read_text()
    assert "| max \\|d logp\\|, mean / max | 0.1 / 0.1 |" in summary
    table = [line for line in summary.splitlines() if line.startswith("|")]
    assert {len(re.findall(r"(?<!\\)\|", line)) for line in table} == {3}


def test_missing_matplotlib_names_the_plot_extra(synthetic_rows, make_run, monkeypatch):
    run = make_run("p", synthetic_rows(3, gain=0.1, kl=0.0))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UnsupportedError, match=r"precision-engine\[plot\]"):
        write_report(run)
