"""`write_report`: PNGs and summary.md from a metrics.jsonl; missing metrics are skipped, not fatal."""

import sys

import pytest

from precision_engine.errors import UnsupportedError
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


def test_report_of_an_empty_run_still_writes_a_summary(make_run):
    assert [path.name for path in write_report(make_run("empty", []))] == ["summary.md"]


def test_missing_matplotlib_names_the_plot_extra(synthetic_rows, make_run, monkeypatch):
    run = make_run("p", synthetic_rows(3, gain=0.1, kl=0.0))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UnsupportedError, match=r"precision-engine\[plot\]"):
        write_report(run)
