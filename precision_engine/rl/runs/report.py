"""`precision report RUN_DIR`: PNG plots of a run's metrics and a markdown summary.

Which metric goes where is the one table below (METRICS, then PLOTS): a trainer that names a metric
differently changes it here and nowhere else. A key prefixed "re:" stands for every metric whose name
matches the regex (verl's correction metrics vary with the mode). Metrics a run did not log are skipped, so a
BF16 run without correction simply has no "fraction corrected" plot.
"""

from __future__ import annotations

import io
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from precision_engine.errors import RunError, UnsupportedError
from precision_engine.rl.runs.files import write_atomic
from precision_engine.rl.runs.run_dir import RunDir

# role -> metric key in metrics.jsonl ("re:" = every key matching the regex, fully)
METRICS: Mapping[str, str] = {
    "reward": "reward/mean",
    "accuracy": "heldout/accuracy",
    "kl": "rollout_corr/kl",
    "max_abs_dlogp": "mismatch/max_abs_dlogp",
    "corrected": r"re:rollout_corr/.*(fraction|frac).*",
    "tokens_per_s": "throughput/tokens_per_s",
    "step_time": "time/step_s",
    "skipped": "actor/skipped_update",  # 1 where a non-finite gradient skipped the optimizer step
}
# file, title, one panel per role (panels share the step axis)
PLOTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("reward.png", "Reward", ("reward",)),
    ("heldout_accuracy.png", "Held-out accuracy", ("accuracy",)),
    ("mismatch.png", "Rollout / training mismatch", ("kl", "max_abs_dlogp")),
    ("fraction_corrected.png", "Fraction corrected by IS", ("corrected",)),
    ("throughput.png", "Throughput", ("tokens_per_s",)),
)
LABELS: Mapping[str, str] = {
    "reward": "mean reward",
    "accuracy": "held-out accuracy",
    "kl": "KL (rollout_corr/kl)",
    "max_abs_dlogp": "max |d logp|",
    "corrected": "fraction",
    "tokens_per_s": "tokens / s",
}

Series = dict[str, tuple[list[int], list[float]]]  # metric key -> (steps, values)


def series(rows: Iterable[Mapping[str, Any]], role: str) -> Series:
    """The (step, value) points of every metric the role names, finite numbers only."""
    key = METRICS[role]
    pattern = re.compile(key[3:]) if key.startswith("re:") else None
    found: Series = {}
    for row in rows:
        for name, value in row.items():
            if not (name == key if pattern is None else pattern.fullmatch(name)):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            steps, values = found.setdefault(name, ([], []))
            steps.append(row["step"])
            values.append(float(value))
    return found


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The numbers a summary or an ablation table shows; a metric the run never logged is left out."""
    out: dict[str, Any] = {"rows": len(rows)}
    if rows:
        out["last_step"] = rows[-1]["step"]
    one = {role: next(iter(series(rows, role).values()), None) for role in METRICS if role != "corrected"}
    if one["accuracy"]:
        steps, values = one["accuracy"]
        best = max(range(len(values)), key=values.__getitem__)
        out |= {"accuracy_first": values[0], "accuracy_last": values[-1]}
        out |= {"accuracy_best": values[best], "accuracy_best_step": steps[best]}
    if one["reward"]:
        out |= {"reward_first": one["reward"][1][0], "reward_last": one["reward"][1][-1]}
    for role in ("kl", "max_abs_dlogp"):
        if one[role]:
            values = one[role][1]
            out |= {f"{role}_mean": sum(values) / len(values), f"{role}_max": max(values)}
    corrected = series(rows, "corrected")
    if corrected:
        out["corrected_mean"] = {name: sum(v) / len(v) for name, (_, v) in sorted(corrected.items())}
    if one["tokens_per_s"]:
        values = one["tokens_per_s"][1]
        out["tokens_per_s_mean"] = sum(values) / len(values)
    if one["step_time"]:
        out["train_time_s"] = sum(one["step_time"][1])
    if one["skipped"]:
        out["skipped_updates"] = int(sum(one["skipped"][1]))
    return out


def write_report(run_dir: str | os.PathLike | RunDir, out_dir: str | os.PathLike | None = None) -> list[Path]:
    """Write the PNGs and summary.md into `out_dir` (default RUN_DIR/report); returns the files written."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir.open(run_dir)
    out = Path(out_dir) if out_dir is not None else run.report_dir
    rows = run.metric_rows()
    report_folder(out)
    plt = pyplot()
    written = []
    for file_name, title, roles in PLOTS:
        panels = [(role, series(rows, role)) for role in roles]
        panels = [(role, found) for role, found in panels if found]
        if not panels:
            continue
        figure, axes = plt.subplots(len(panels), 1, figsize=(7, 0.6 + 2.6 * len(panels)), sharex=True, squeeze=False)
        for axis, (role, found) in zip(axes[:, 0], panels):
            for name, (steps, values) in found.items():
                axis.plot(steps, values, marker="." if len(steps) < 50 else None, label=name)
            axis.set_ylabel(LABELS.get(role, role))
            axis.grid(alpha=0.3)
            if len(found) > 1:
                axis.legend(fontsize="small")
        axes[-1, 0].set_xlabel("step")
        figure.suptitle(f"{title}: {run.policy_name}")
        written.append(save_figure(figure, out / file_name))
    remove_stale_plots(out, [file_name for file_name, _, _ in PLOTS], written)
    summary = _summary_markdown(run, summarize(rows), [path.name for path in written])
    written.append(write_atomic(out / "summary.md", summary))
    return written


def report_folder(path: Path) -> Path:
    """`path`, made if missing; a RunError naming it when something else is there."""
    if path.exists() and not path.is_dir():
        raise RunError(f"{path} exists and is not a directory (hint: move it aside to write the report there)")
    path.mkdir(parents=True, exist_ok=True)
    return path


def remove_stale_plots(folder: Path, ours: Sequence[str], written: Sequence[Path]) -> None:
    """Delete our plots that this report did not draw (a metric the run no longer has), so none describes an
    earlier state of the run; files of other names are left alone."""
    for name in set(ours) - {path.name for path in written}:
        (folder / name).unlink(missing_ok=True)


def markdown_cell(text: str) -> str:
    """`text` as one cell of a markdown table: a bare | would start another."""
    return text.replace("|", "\\|")


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display), imported on first use."""
    try:
        import matplotlib
    except ImportError:
        raise UnsupportedError(
            "plots need matplotlib: pip install 'precision-engine[plot]' (or pip install matplotlib)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure, path: Path) -> Path:
    """Save and close (pyplot keeps every open figure alive otherwise); PNG bytes written atomically."""
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=110)
    pyplot().close(figure)
    return write_atomic(path, buffer.getvalue())


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _summary_markdown(run: RunDir, stats: Mapping[str, Any], plots: Sequence[str]) -> str:
    lines = [f"# Run report: {run.policy_name}", "", f"`{run.info.get('command_line', '')}`", ""]
    table = [
        ("policy", run.policy_name),
        ("steps", stats.get("last_step")),
        ("metric rows", stats["rows"]),
        ("held-out accuracy, first", stats.get("accuracy_first")),
        ("held-out accuracy, last", stats.get("accuracy_last")),
        ("held-out accuracy, best", _best(stats)),
        ("reward, first -> last", _arrow(stats.get("reward_first"), stats.get("reward_last"))),
        ("mismatch KL, mean / max", _pair(stats.get("kl_mean"), stats.get("kl_max"))),
        ("max |d logp|, mean / max", _pair(stats.get("max_abs_dlogp_mean"), stats.get("max_abs_dlogp_max"))),
        *((f"{name}, mean", value) for name, value in stats.get("corrected_mean", {}).items()),
        ("throughput, tokens/s (mean)", stats.get("tokens_per_s_mean")),
        ("training time, s (sum of step times)", stats.get("train_time_s")),
        ("updates skipped (non-finite gradient)", stats.get("skipped_updates")),
    ]
    lines += ["| | |", "|---|---|"]
    lines += [f"| {markdown_cell(name)} | {markdown_cell(fmt(value))} |" for name, value in table if value is not None]
    resumed = run.info.get("resumed", [])
    if resumed:
        at = ", ".join("none (from the start)" if entry.get("step") is None else str(entry.get("step"))
                       for entry in resumed)
        lines += ["", f"Resumed {len(resumed)} time(s), from checkpoint step(s) {at}."]
    versions = run.info.get("versions", {})
    if versions:
        lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v is not None) + "."]
    lines += [""] + [f"![{Path(name).stem}]({name})" for name in plots]
    return "\n".join(lines) + "\n"


def _best(stats: Mapping[str, Any]) -> str | None:
    if "accuracy_best" not in stats:
        return None
    return f"{fmt(stats['accuracy_best'])} (step {stats['accuracy_best_step']})"


def _arrow(first: Any, last: Any) -> str | None:
    return None if first is None else f"{fmt(first)} -> {fmt(last)}"


def _pair(mean: Any, peak: Any) -> str | None:
    return None if mean is None else f"{fmt(mean)} / {fmt(peak)}"
