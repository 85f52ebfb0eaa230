"""`--resume`: bring a run back to its last checkpoint, metrics included.

The model, optimizer and RNG streams come from the newest intact checkpoint; metrics rows of later steps are
dropped, because the resumed run will log those steps again. So a run killed at any moment and resumed logs
every step exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from precision_engine.rl.runs.checkpoint import Checkpoint, load_latest_checkpoint
from precision_engine.rl.runs.run_dir import RunDir


def resume_run(
    run: RunDir,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    generators: Mapping[str, torch.Generator] | None = None,
    fallback: bool = False,
    command: Sequence[str] | None = None,
) -> Checkpoint | None:
    """Restore the newest checkpoint into the given objects and cut metrics.jsonl back to its step.

    Returns the checkpoint (continue at `checkpoint.step + 1`, from `checkpoint.data_state`), or None when the
    run had not reached its first checkpoint: then every row is dropped and the run starts over. The restart
    is recorded in run.json (`command` defaults to sys.argv).
    """
    checkpoint = load_latest_checkpoint(
        run, model=model, optimizer=optimizer, generators=generators, fallback=fallback
    )
    with run.metrics() as metrics:
        metrics.truncate_after(checkpoint.step if checkpoint is not None else -1)
    run.record_resume(command, step=None if checkpoint is None else checkpoint.step)
    return checkpoint
