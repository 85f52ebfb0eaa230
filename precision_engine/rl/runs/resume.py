"""`--resume`: bring a run back to its last checkpoint, metrics included.

The model, optimizer and RNG streams come from the newest intact checkpoint; metrics rows of later steps are
dropped, because the resumed run will log those steps again. So a run killed at any moment and resumed logs
every step exactly once. `check_same_run` first refuses a resume under another policy or other settings, which
would mix two runs in one metrics.jsonl under one run.json.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import torch
import yaml

from precision_engine.errors import RunError, UsageError
from precision_engine.policy import Policy
from precision_engine.rl.runs.checkpoint import Checkpoint, load_latest_checkpoint
from precision_engine.rl.runs.files import to_json
from precision_engine.rl.runs.run_dir import POLICY_FILE, RunDir, policy_yaml

_ABSENT = object()  # a setting one side does not have
_SHOWN_CHARS = 80  # a long value (a rule list) is cut in the message; run.json and policy.yaml hold it whole


def resume_run(
    run: RunDir,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    generators: Mapping[str, torch.Generator] | None = None,
    fallback: bool = False,
    command: Sequence[str] | None = None,
    config: Mapping | None = None,
) -> tuple[RunDir, Checkpoint | None]:
    """Restore the newest checkpoint into the given objects and cut metrics.jsonl back to its step.

    Returns the run as run.json now records it, and the checkpoint (continue at `checkpoint.step + 1`, from
    `checkpoint.data_state`), or None when the run had not reached its first checkpoint: then every row is
    dropped and the run starts over. The restart is recorded in run.json (`command` defaults to sys.argv),
    with `config`, when given, as the run's settings from now on (see RunDir.record_resume). A log that
    ends before the checkpoint is refused: the resumed run would never log the missing steps.
    """
    checkpoint = load_latest_checkpoint(
        run, model=model, optimizer=optimizer, generators=generators, fallback=fallback
    )
    with run.metrics() as metrics:
        if checkpoint is not None and (metrics.last_step is None or metrics.last_step < checkpoint.step):
            ends = "is empty" if metrics.last_step is None else f"ends at step {metrics.last_step}"
            raise RunError(f"{run.metrics_path} {ends}, but the newest checkpoint is of step {checkpoint.step}: "
                           "the steps between would have no rows (hint: restore the log from a backup, or "
                           "start a new run)")
        metrics.truncate_after(checkpoint.step if checkpoint is not None else -1)
    run = run.record_resume(command, step=None if checkpoint is None else checkpoint.step, config=config)
    return run, checkpoint


def check_same_run(
    run: RunDir,
    *,
    policy: Policy | Mapping,
    config: Mapping,
    recorded: Mapping | None = None,
    may_change: Collection[str] = (),
    labels: Mapping[str, str] | None = None,
) -> None:
    """Refuse (UsageError) to continue `run` under a policy or settings other than those it was started with:
    its metrics, checkpoints and report would mix two runs. Call it before any expensive work.

    The resolved policy document is compared with policy.yaml (its description aside), `config` with run.json's
    settings (`recorded` stands in for them; `policy` there is the name, compared through the document), key by
    key into nested mappings; top-level keys in `may_change` are not compared. `labels` adds a setting's flag to
    its name in the message, e.g. {"seed": "--seed"}.
    """
    differences = _policy_differences(run, policy)
    recorded = run.info.get("config", {}) if recorded is None else recorded
    skipped = {"policy", *may_change}
    for key, old, new in _differences(recorded, json.loads(to_json(config))):
        if key.split(".")[0] not in skipped:
            label = (labels or {}).get(key)
            differences.append((f"{key} ({label})" if label else key, old, new))
    if differences:
        listed = "; ".join(f"{name}: recorded {_show(old)}, given {_show(new)}" for name, old, new in differences)
        last = [run.info, *run.info.get("resumed", [])][-1]  # a resume may have raised --steps since the start
        raise UsageError(
            f"{run.path} was started with another policy or other settings: {listed} (hint: continue it with the "
            f"policy and flags it last ran with, `{last.get('command_line', '?')}`, or choose a new --out)"
        )


def _policy_differences(run: RunDir, policy: Policy | Mapping) -> list[tuple[str, Any, Any]]:
    """The policy's name if it changed, else the keys of the resolved document that did."""
    try:
        recorded = yaml.safe_load(run.policy_path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise RunError(f"{run.policy_path}: unreadable, so the policy cannot be compared ({err})") from None
    given = yaml.safe_load(policy_yaml(policy))  # through YAML as well, so tuples and proxies compare as written
    if not isinstance(recorded, dict):
        raise RunError(f"{run.policy_path}: not a policy document, so the policy cannot be compared (hint: "
                       "restore it; `precision run` writes the resolved policy there)")
    if recorded.get("name") != given.get("name"):
        return [("policy", run.policy_name, given.get("name"))]
    return [(f"policy {given['name']} ({POLICY_FILE}) {key}", old, new)
            for key, old, new in _differences(recorded, given) if key != "description"]


def _differences(recorded: Any, given: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(dotted key, recorded, given) for every value that differs, descending into mappings both sides have."""
    if isinstance(recorded, Mapping) and isinstance(given, Mapping):
        for key in [*recorded, *(k for k in given if k not in recorded)]:
            yield from _differences(recorded.get(key, _ABSENT), given.get(key, _ABSENT), f"{prefix}{key}.")
    elif recorded != given:
        yield prefix[:-1], recorded, given


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "nothing"
    text = to_json(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."
