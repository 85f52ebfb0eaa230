"""kill -9 in the middle of a run, then resume: no metric row lost, torn or duplicated, and the same rows and
final weights as an uninterrupted run (data order and every RNG stream restored). One child process: about
3 s on an idle 2-core machine, 8 s on a loaded one (mostly the child's torch import)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from precision_engine.rl.runs import MetricsLog, list_checkpoints

TOY = Path(__file__).with_name("toy_run.py")


def _load_toy():
    import importlib.util

    spec = importlib.util.spec_from_file_location("toy_run", TOY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_kill_9_then_resume_continues_exactly(tmp_path):
    toy = _load_toy()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the child runs single-threaded too: same bits
    try:
        reference_weights, reference_rows = toy.train(tmp_path / "reference")

        run_path = tmp_path / "killed"
        child = subprocess.Popen([sys.executable, str(TOY), str(run_path), "--sleep", "0.02"])
        metrics, deadline = run_path / "metrics.jsonl", time.monotonic() + 60
        while time.monotonic() < deadline and child.poll() is None:
            if metrics.exists() and metrics.read_bytes().count(b"\n") >= 23:
                break
            time.sleep(0.005)
        assert child.poll() is None, "the child finished before it could be killed"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL

        rows = MetricsLog(metrics).rows()  # a torn last line, if any, is cut here
        steps = [row["step"] for row in rows]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 23
        assert rows == reference_rows[: len(rows)]  # every surviving row intact, bit for bit
        last = int(list_checkpoints(run_path)[-1].name.split("_")[1])
        assert last % toy.EVERY == 0 and last <= len(steps)

        weights, resumed_rows = toy.train(run_path)
    finally:
        torch.set_num_threads(threads)

    assert [row["step"] for row in resumed_rows] == list(range(1, toy.STEPS + 1))
    assert resumed_rows == reference_rows
    assert all(torch.equal(weights[name], tensor) for name, tensor in reference_weights.items())
    info = json.loads((run_path / "run.json").read_text())
    assert [entry["step"] for entry in info["resumed"]] == [last]
