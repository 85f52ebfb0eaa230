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
    assert result.exit_code == 2 and f"{blocker} is a file, so no folder can be made there" in result.output
    result = runner.invoke(app, ["bench", "kernels", "--out", str(tmp_path)])  # the results would be lost after
    assert result.exit_code == 2 and "a directory; --out names the JSON file" in result.output


def test_bench_block_refuses_an_unknown_policy_and_a_run_where_every_row_failed(tmp_path):
    result = runner.invoke(app, ["bench", "block", "--quick", "--device", "cpu", "--policy", "nosuch"])
    assert result.exit_code == 2 and "nosuch" in result.output and "ms" not in result.output
    result = runner.invoke(app, ["bench", "block", "--quick", "--device", "cpu", "--model", "tiny-qwen3-moe",
                                 "--policy", "bf16_baseline", "--mode", "fast"])
    assert result.exit_code == 2 and "every row failed, the first with: UnsupportedError" in result.output


@pytest.mark.parametrize("args", [["linear", "--variants", ""], ["linear", "--tokens", ""], ["linear", "--shapes", ""],
                                  ["quant", "--only", ","]])
def test_bench_refuses_an_empty_list_instead_of_running_everything(args):
    result = runner.invoke(app, ["bench", *args])
    assert result.exit_code == 2 and "needs a CUDA GPU" not in result.output, result.output
