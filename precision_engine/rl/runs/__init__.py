"""Run bookkeeping for `precision run` and `precision ablate`: the run directory, metrics, checkpoints,
resume, the report and the ablation table. Independent of the trainer: it stores what it is given.

    run = RunDir.create(out, policy=policy, plan=plan_to_dict(plan, phases), config={"seed": 0})
    with run.metrics() as metrics:
        for step in range(start, steps + 1):
            metrics.append({"step": step, "reward/mean": ...})          # before the checkpoint of that step
            if step % every == 0:
                save_checkpoint(run, step, model=model, optimizer=opt, generators={"sampler": gen},
                                data_state={"epoch": epoch, "index": index}, trainer_state={...})
    write_report(run)

    # --resume: restores model, optimizer and RNG streams, drops metric rows after the checkpoint
    run = RunDir.open(out)
    check_same_run(run, policy=policy, config={"seed": 0})      # refuses another policy or settings, before any work
    run, checkpoint = resume_run(run, model=model, optimizer=opt, generators={"sampler": gen})
    start = 1 if checkpoint is None else checkpoint.step + 1
"""

from precision_engine.rl.runs.ablate import ABLATION_FILES, write_ablation
from precision_engine.rl.runs.checkpoint import (
    Checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_latest_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)
from precision_engine.rl.runs.metrics import MetricsLog
from precision_engine.rl.runs.report import METRICS, PLOTS, summarize, write_report
from precision_engine.rl.runs.resume import check_same_run, resume_run
from precision_engine.rl.runs.run_dir import RunDir, versions

__all__ = [
    "ABLATION_FILES",
    "METRICS",
    "PLOTS",
    "Checkpoint",
    "MetricsLog",
    "RunDir",
    "check_same_run",
    "list_checkpoints",
    "load_checkpoint",
    "load_latest_checkpoint",
    "resume_run",
    "save_checkpoint",
    "summarize",
    "verify_checkpoint",
    "versions",
    "write_ablation",
    "write_report",
]
