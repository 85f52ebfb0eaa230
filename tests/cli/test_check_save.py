"""`precision check`: flags and a --save path that cannot work are refused before any model is built, and a
report that cannot be written never costs the verdict."""

import errno
import json
import os

import pytest
from typer.testing import CliRunner

from precision_engine.cli.app import app

runner = CliRunner()
FAST = ("--seq-len", "8", "--no-decode", "--no-layers", "--samples", "0")


def check(*args):
    return runner.invoke(app, ["check", "-p", "jetrl_unified", "-m", "tiny-llama", *args])


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if a model is built: these refusals come before any."""
    import precision_engine.models.loader as loader

    def refuse(*args, **kwargs):
        raise AssertionError("a model was built before the bad flag was refused")

    monkeypatch.setattr(loader, "load_model", refuse)


def _refused(result, words):
    assert result.exit_code == 2, result.output
    assert words in result.output and "internal error" not in result.output, result.output


@pytest.mark.parametrize("path, words", [
    ("folder", "is a directory"),
    ("afile/report.json", "afile is not a directory"),
    ("missing/report.json", "no such directory"),
])
def test_an_unwritable_save_path_is_refused_up_front(tmp_path, no_model, path, words):
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("keep")
    _refused(check(*FAST, "--save", str(tmp_path / path)), words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "folder"]
    assert (tmp_path / "afile").read_text() == "keep"


@pytest.fixture
def full_disk(monkeypatch):
    """write_atomic's last step finds the disk full."""
    import precision_engine.rl.runs.files as files

    class FullDisk:
        """`os` for write_atomic alone."""

        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def replace(src, dst):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "os", FullDisk())


def test_a_failed_save_prints_the_verdict_first_and_leaves_no_file(tmp_path, full_disk):
    result = check(*FAST, "--save", str(tmp_path / "report.json"))
    _refused(result, "No space left on device")
    assert "numerics promise holds" in result.output  # the verdict came out before the write failed
    assert result.output.index("numerics promise holds") < result.output.index("error: --save")
    assert list(tmp_path.iterdir()) == []  # neither the report nor its temporary file


def test_a_failed_save_under_json_prints_one_object_holding_report_and_error(tmp_path, full_disk):
    result = check(*FAST, "--json", "--save", str(tmp_path / "report.json"))
    assert result.exit_code == 2, result.output
    document = json.loads(result.stdout)  # one document: a second would fail to parse
    assert document["prefill"]["bitwise"] and document["error"]["exit_code"] == 2
    assert "No space left on device" in document["error"]["message"]
    assert "error: --save" in result.stderr


def test_save_replaces_the_report_whole(tmp_path):
    saved = tmp_path / "report.json"
    saved.write_text("old")
    result = check(*FAST, "--save", str(saved))
    assert result.exit_code == 0, result.output
    assert json.loads(saved.read_text())["prefill"]["bitwise"]
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


@pytest.mark.parametrize("flags, words", [
    (("--seed", str(2**63)), "--seed"),
    (("--seed", "99999999999999999999"), "--seed"),
    (("--seed", "-1"), "--seed"),
    (("--top", "-1"), "--top"),
    (("--seq-len", "3000"), "--seq-len 3000: tiny-llama takes at most 2048 positions"),
    (("--seq-len", "2048", "--prompt-len", "2040", "--gen", "32"), "2072 positions"),
])
def test_out_of_range_flags_are_refused_before_any_model(no_model, flags, words):
    _refused(check("--no-decode", *flags), words)
