"""`precision bench`: argument checking and the no-GPU refusal (the benchmarks themselves run on the H200)."""

import pytest
import torch
from typer.testing import CliRunner

from precision_engine.cli.app import app

runner = CliRunner()


def test_bench_rejects_unknown_target():
    result = runner.invoke(app, ["bench", "everything"])
    assert result.exit_code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_bench_without_gpu_is_one_clear_error():
    result = runner.invoke(app, ["bench", "kernels", "--quick"])
    assert result.exit_code == 2  # a refusal is a failure, never a verdict
    assert "needs a CUDA GPU" in result.output
    assert "Traceback" not in result.output


def test_bench_help_lists_both_targets():
    result = runner.invoke(app, ["bench", "--help"])
    assert result.exit_code == 0
    assert "kernels" in result.output and "linear" in result.output


def test_bench_out_under_a_file_fails_before_benchmarking(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(app, ["bench", "kernels", "--out", str(blocker / "sub" / "k.json")])
    assert result.exit_code == 2 and "cannot create its folder" in result.output
