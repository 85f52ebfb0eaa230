"""`precision ablate`: one table and overlaid plots for runs that differ only in their policy.

The first run listed is the reference: every delta is against it (the seed papers compare against BF16, so
list bf16_baseline first). Runs whose recorded config differs in anything but the policy are still compared,
but the table says which settings differ, since then the policy is not the only cause.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from precision_engine.errors import UsageError
from precision_engine.rl.runs.files import to_json, write_atomic
from precision_engine.rl.runs.report import (LABELS, fmt, markdown_cell, pyplot, remove_stale_plots, report_folder,
                                             save_figure, series, summarize)
from precision_engine.rl.runs.run_dir import RunDir

# file, title, one panel per role of report.METRICS; one line per run in each panel
ABLATION_PLOTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("ablation_accuracy.png", "Held-out accuracy", ("accuracy",)),
    ("ablation_mismatch.png", "Rollout / training mismatch", ("kl", "max_abs_dlogp")),
    ("ablation_reward.png", "Reward", ("reward",)),
)
# what write_ablation may write into its folder, beside the runs' own folders
ABLATION_FILES = ("ablation.json", "ablation.md", *(file_name for file_name, _, _ in ABLATION_PLOTS))
_IGNORED_CONFIG = {"policy", "out", "run_dir", "resume"}


def ablation_rows(runs: Sequence[RunDir]) -> list[dict[str, Any]]:
    """One summary per run, with `delta_accuracy_*` against the first run."""
    table = []
    for run in runs:
        stats = summarize(run.metric_rows())
        table.append({"policy": run.policy_name, "run_dir": str(run.path), **stats})
    reference = table[0]
    for row in table:
        for which in ("last", "best"):
            key = f"accuracy_{which}"
            if key in row and key in reference:
                row[f"delta_accuracy_{which}"] = row[key] - reference[key]
    return table


def write_ablation(run_dirs: Sequence[str | os.PathLike | RunDir], out_dir: str | os.PathLike) -> list[Path]:
    """Write ablation.md, ablation.json and the overlaid PNGs into `out_dir`; returns the files written."""
    if not run_dirs:
        raise UsageError("ablate needs at least one finished run directory")
    runs = [run if isinstance(run, RunDir) else RunDir.open(run) for run in run_dirs]
    table = ablation_rows(runs)
    out = report_folder(Path(out_dir))
    differing = _differing_config(runs)
    written = [write_atomic(out / "ablation.json", to_json({"runs": table, "config_differs": differing}, indent=2))]
    rows_by_run = [run.metric_rows() for run in runs]
    plt = pyplot()
    for file_name, title, roles in ABLATION_PLOTS:
        panels = [(role, [next(iter(series(rows, role).values()), None) for rows in rows_by_run]) for role in roles]
        panels = [(role, lines) for role, lines in panels if any(lines)]
        if not panels:
            continue
        figure, axes = plt.subplots(len(panels), 1, figsize=(7, 0.6 + 2.8 * len(panels)), sharex=True, squeeze=False)
        for axis, (role, lines) in zip(axes[:, 0], panels):
            for run, line in zip(runs, lines):
                if line:
                    axis.plot(*line, label=run.policy_name)
            axis.set_ylabel(LABELS.get(role, role))
            axis.grid(alpha=0.3)
            axis.legend(fontsize="small")
        axes[-1, 0].set_xlabel("step")
        figure.suptitle(title)
        written.append(save_figure(figure, out / file_name))
    remove_stale_plots(out, [file_name for file_name, _, _ in ABLATION_PLOTS], written)
    written.append(write_atomic(out / "ablation.md", _markdown(table, differing, [p.name for p in written[1:]])))
    return written


_COLUMNS: tuple[tuple[str, str], ...] = (
    ("policy", "policy"),
    ("accuracy_last", "final acc"),
    ("accuracy_best", "best acc"),
    ("delta_accuracy_last", "delta final"),
    ("delta_accuracy_best", "delta best"),
    ("kl_mean", "KL mean"),
    ("kl_max", "KL max"),
    ("max_abs_dlogp_mean", "max|dlogp| mean"),
    ("max_abs_dlogp_max", "max|dlogp| max"),
    ("corrected_mean", "fraction corrected"),
    ("tokens_per_s_mean", "tokens/s"),
    ("train_time_s", "time (s)"),
)


def _markdown(table: Sequence[Mapping[str, Any]], differing: Mapping[str, list], plots: Sequence[str]) -> str:
    columns = [(key, title) for key, title in _COLUMNS if any(key in row for row in table)]
    lines = [f"# Ablation: {len(table)} policies (deltas against {table[0]['policy']})", ""]
    lines.append("| " + " | ".join(markdown_cell(title) for _, title in columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for row in table:
        cells = [markdown_cell(_cell(row.get(key), signed=key.startswith("delta_"))) for key, _ in columns]
        lines.append("| " + " | ".join(cells) + " |")
    if differing:
        lines += ["", "Note: these settings differ between the runs: "
                  + "; ".join(f"{key} = {values}" for key, values in differing.items()) + "."]
    lines += [""] + [f"![{Path(name).stem}]({name})" for name in plots]
    return "\n".join(lines) + "\n"


def _cell(value: Any, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, Mapping):
        return ", ".join(f"{name.rsplit('/', 1)[-1]} {fmt(v)}" for name, v in value.items())
    return f"{value:+.4g}" if signed else fmt(value)


def _differing_config(runs: Sequence[RunDir]) -> dict[str, list]:
    """Recorded settings (besides the policy) whose values are not the same in every run."""
    configs = [run.info.get("config", {}) for run in runs]
    keys = sorted(set().union(*configs) - _IGNORED_CONFIG)
    return {key: [c.get(key) for c in configs] for key in keys if len({to_json(c.get(key)) for c in configs}) > 1}
