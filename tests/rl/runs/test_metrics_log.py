"""metrics.jsonl: each row whole or absent, torn tails cut on open, resume truncation, strict step order."""

import json
import os

import pytest
import torch

from precision_engine.errors import RunError
from precision_engine.rl.runs import MetricsLog


def test_rows_round_trip_and_survive_reopen(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with MetricsLog(path) as log:
        log.append({"step": 0, "loss": torch.tensor(0.25), "name": "a\nb"})  # tensors become numbers
        log.append({"step": 1, "loss": float("nan")})
    lines = path.read_bytes().split(b"\n")
    assert len(lines) == 3 and lines[-1] == b""
    rows = MetricsLog(path).rows()
    assert rows[0] == {"step": 0, "loss": 0.25, "name": "a\nb"}
    assert rows[1]["step"] == 1 and rows[1]["loss"] != rows[1]["loss"]  # NaN kept: it is information
    assert MetricsLog(path).last_step == 1


def test_each_row_is_one_write(tmp_path, monkeypatch):
    calls = []
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: calls.append(bytes(data)) or real_write(fd, data))
    with MetricsLog(tmp_path / "metrics.jsonl") as log:
        log.append({"step": 1, "reward/mean": 0.5, "note": "x" * 5000})
    assert len(calls) == 1 and calls[0].endswith(b"\n") and calls[0].count(b"\n") == 1


def test_torn_final_line_is_cut_on_open(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with MetricsLog(path) as log:
        log.append({"step": 1, "reward/mean": 0.1})
        log.append({"step": 2, "reward/mean": 0.2})
    intact = path.read_bytes()
    with path.open("ab") as file:  # what a kill in the middle of the third write leaves
        file.write(b'{"step":3,"reward/me')
    log = MetricsLog(path)
    assert path.read_bytes() == intact
    assert [row["step"] for row in log.rows()] == [1, 2]
    log.append({"step": 3, "reward/mean": 0.3})
    log.close()
    assert [row["step"] for row in MetricsLog(path).rows()] == [1, 2, 3]


def test_a_torn_only_line_leaves_an_empty_log(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step":1,')
    assert MetricsLog(path).rows() == [] and path.read_bytes() == b""


def test_truncate_after_drops_later_steps(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for step in range(1, 8):
        log.append({"step": step})
    assert log.truncate_after(4) == 3
    assert [row["step"] for row in log.rows()] == [1, 2, 3, 4]
    log.append({"step": 5})  # continues after the kept rows, on a fresh descriptor
    assert log.truncate_after(5) == 0
    assert log.truncate_after(-1) == 5 and log.rows() == [] and log.last_step is None
    log.close()


def test_steps_must_increase(tmp_path):
    with MetricsLog(tmp_path / "metrics.jsonl") as log:
        log.append({"step": 3})
        with pytest.raises(ValueError, match="not after the last logged step 3"):
            log.append({"step": 3})
        with pytest.raises(ValueError, match="integer 'step'"):
            log.append({"loss": 1.0})
    assert MetricsLog(tmp_path / "metrics.jsonl").rows() == [{"step": 3}]


def test_a_damaged_interior_line_names_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1}) + "\nnot json\n" + json.dumps({"step": 3}) + "\n")
    with pytest.raises(RunError, match=r"metrics.jsonl:2: not a JSON row"):
        MetricsLog(path)
