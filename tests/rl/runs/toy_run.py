"""A toy training loop with every stream a real run has: a shuffled data order drawn from a sampler
generator, global torch noise, python `random` and numpy draws, AdamW. Run as a script by the kill -9 test
(`python toy_run.py RUN_DIR [--sleep S]`): it resumes when RUN_DIR already holds a run."""

import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

from precision_engine.rl.runs import RunDir, resume_run, save_checkpoint

STEPS, EVERY, BATCH, DATA = 60, 5, 8, 32


def train(run_path: Path, sleep: float = 0.0) -> tuple[dict, list[dict]]:
    """Run (or resume) to STEPS; returns the final weights and every metric row."""
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    sampler = torch.Generator().manual_seed(1)
    data_x = torch.randn(DATA, 4, generator=torch.Generator().manual_seed(2))
    data_y = data_x.sum(1, keepdim=True)
    if (run_path / "run.json").exists():
        run = RunDir.open(run_path)
        run, checkpoint = resume_run(run, model=model, optimizer=optimizer, generators={"sampler": sampler},
                                command=["toy_run", "--resume"])
    else:
        run, checkpoint = RunDir.create(run_path, policy={"name": "toy"}, plan={}, command=["toy_run"]), None
    if checkpoint is None:
        start, epoch, index, order = 1, 0, 0, torch.randperm(DATA, generator=sampler).tolist()
    else:
        start = checkpoint.step + 1
        epoch, index, order = (checkpoint.data_state[k] for k in ("epoch", "index", "order"))
    with run.metrics() as log:
        for step in range(start, STEPS + 1):
            batch = order[index:index + BATCH]
            index += BATCH
            if index >= DATA:
                epoch, index, order = epoch + 1, 0, torch.randperm(DATA, generator=sampler).tolist()
            x = data_x[batch] + 0.01 * torch.randn(len(batch), 4)
            loss = (model(x) - data_y[batch]).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            log.append({"step": step, "loss": loss.item(), "reward/mean": random.random(),
                        "noise": float(np.random.rand()), "epoch": epoch})
            if step % EVERY == 0:
                save_checkpoint(run, step, model=model, optimizer=optimizer, generators={"sampler": sampler},
                                data_state={"epoch": epoch, "index": index, "order": order}, keep_last=2)
            time.sleep(sleep)
        rows = log.rows()
    return {k: v.clone() for k, v in model.state_dict().items()}, rows


if __name__ == "__main__":
    torch.set_num_threads(1)
    train(Path(sys.argv[1]), sleep=float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
