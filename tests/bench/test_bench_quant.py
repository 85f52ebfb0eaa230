"""`precision bench quant` prints each row as it is measured (a run cut short keeps the rows it measured on screen)
and rewrites its JSON whole after each; the rows, the printed lines and the JSON agree; --only must name a kernel,
checked before the GPU is. CPU: the GPU timing is replaced by fixed times, the cases by two."""

import json

import pytest
import torch
import typer
from typer.testing import CliRunner

from precision_engine.bench import gemm, quant
from precision_engine.cli import bench as bench_cli
from precision_engine.cli.app import app
from precision_engine.numerics.formats import PRESET_FORMATS

runner = CliRunner()


@pytest.fixture
def fake_gpu(monkeypatch):
    """Two cases, 4 MB in 2 us and 2 MB in 4 us against a 4000 GB/s copy (the second, a re-quantizer, in 5 us behind
    its dgrad). Returns (how many lines the command had printed as each timing began, how many rows the JSON held
    each time it was written)."""
    monkeypatch.setattr(quant.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gemm, "environment", lambda: {"device": "FakeGPU", "torch": "2.x", "triton": "3.x"})
    monkeypatch.setattr(quant, "copy_bandwidth", lambda: 4000.0)
    cases = [("1x128", (8, 128), None, None, 4_000_000), ("requant fp8 -> tokens^T", (8, 128), None, None, 2_000_000)]
    monkeypatch.setattr(quant, "_cases", lambda sweep: cases)
    monkeypatch.setattr(quant, "rotation", lambda make, nbytes: [])
    monkeypatch.setattr(quant, "dgrad", lambda m, c: lambda: None)
    times = iter([[0.002], [0.004], [0.005]])
    lines_before, echoed, written = [], [], []
    real_echo, real_write = typer.echo, bench_cli.write_json

    def echo(message="", **kwargs):
        echoed.append(message)
        real_echo(message, **kwargs)

    def time_cuda_turns(fns, **kwargs):
        lines_before.append(len(echoed))
        return [[1.0], next(times)]  # the kernel each one runs behind, then the kernel

    def write_json(rows, out, **extra):
        written.append(len(rows))
        real_write(rows, out, **extra)

    monkeypatch.setattr(typer, "echo", echo)
    monkeypatch.setattr(quant, "time_cuda_turns", time_cuda_turns)
    monkeypatch.setattr(bench_cli, "write_json", write_json)
    return lines_before, written


def test_rows_print_as_measured_and_the_json_holds_them(fake_gpu, tmp_path):
    out = tmp_path / "q.json"
    result = runner.invoke(app, ["bench", "quant", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert [r["kernel"] for r in doc["rows"]] == ["1x128", "requant fp8 -> tokens^T"]
    assert [r["gbps"] for r in doc["rows"]] == [2000.0, 500.0]
    assert [r["pct_copy"] for r in doc["rows"]] == [50.0, 12.5]
    assert [r.get("pct_copy_behind_dgrad") for r in doc["rows"]] == [None, 10.0]
    assert doc["copy_gbps"] == 4000.0 and doc["reps"] == 40 and doc["command"].startswith("precision")
    lines_before, written = fake_gpu
    assert lines_before == [1, 2, 2]  # the header before the first timing, the first row before the second's two
    assert written == [1, 2]  # the JSON rewritten whole as each row came
    lines = result.output.splitlines()
    assert lines[0].startswith("FakeGPU") and "device copy 4000 GB/s" in lines[0] and lines[1].endswith("% dgrad")
    assert lines[2:4] == [quant.table_row(r) for r in doc["rows"]]
    assert lines[2].endswith("50.0%") and lines[3].endswith("12.5%    10.0%")
    assert lines[4] == ("requant fp8 -> tokens^T: >= 80% of copy on 0 of 1 shapes (12.5-12.5%); behind its dgrad "
                        "on 0 of 1 shapes (10.0-10.0%)")  # a target's row
    assert lines[5] == f"wrote {out}"


def test_only_must_name_a_kernel_before_any_gpu_is_asked_for(monkeypatch):
    monkeypatch.setattr(quant, "_cases", lambda sweep: [("requant fp8 -> tokens^T", (8, 128), None, None, 1)])
    result = runner.invoke(app, ["bench", "quant", "--only", "requant,reqaunt"])
    assert result.exit_code == 2
    assert "no kernel's name holds 'reqaunt'" in result.output and "requant fp8 -> tokens^T" in result.output


def test_kernel_names_are_the_cases_once_each_in_order():
    names = quant.kernel_names()
    assert names[0] == "1x128 act (triton)" and "requant fp8 -> tokens^T" in names
    assert len(names) == len(set(names))
    assert set(names) < set(quant.kernel_names(sweep=True))


def test_the_summary_counts_the_shapes_that_reach_each_target():
    rows = [{"kernel": "requant fp8 -> tokens^T", "shape": [m, 4096], "pct_copy": p}
            for m, p in ((8192, 59.4), (16384, 81.0), (32768, 68.2))]
    rows += [{"kernel": "1x128 act (triton)", "shape": [8192, 4096], "pct_copy": 85.5},
             {"kernel": "requant c32 x1 v4 w2", "shape": [8192, 4096], "pct_copy": 90.0}]
    assert quant.summary(rows) == ["1x128 act (triton): >= 80% of copy on 1 of 1 shapes (85.5-85.5%)",
                                   "requant fp8 -> tokens^T: >= 80% of copy on 1 of 3 shapes (59.4-81.0%)"]


def test_filter_keeps_only_the_named_kernels(fake_gpu):
    seen = []
    rows = quant.run(only=("requant",), on_row=lambda row, so_far: seen.append((row, list(so_far))))
    assert [r["kernel"] for r in rows] == ["requant fp8 -> tokens^T"]
    assert seen == [(rows[0], rows[:1])]


def test_the_sweep_times_every_gluon_requantizer_program_with_both_scale_kinds_where_it_runs(monkeypatch):
    """Where the Gluon re-quantizer runs (Hopper, Triton 3.6; pretended here), `--sweep` has a row for each of its
    program shapes with fp32 scales and with power-of-two ones, one tile a program and the ring, in both layouts:
    AUTO takes fp32 scales only, so the pow2 rows say what it would give."""
    from precision_engine.numerics import gluon_requant

    assert not any("gluon" in name for name in quant.kernel_names(sweep=True))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gluon_requant, "available", lambda device: True)
    names = quant.kernel_names(sweep=True)
    for warps, lanes in quant.GLUON_REQUANT_SWEEP:
        for ring in ("", " ring"):
            assert {f"requant gluon w{warps} t{lanes}{ring}", f"requant pow2 gluon w{warps} t{lanes}{ring}"} <= set(
                names)
    assert {f"requant blocks gluon t{lanes}{ring}" for lanes in (8, 4) for ring in ("", " ring")} <= set(names)
    assert len(names) == len(set(names))


def test_summary_gives_the_target_rows_share_of_a_copy_of_their_own_bytes():
    kernel = "requant fp8 -> tokens^T"
    rows = [{"kernel": kernel, "shape": [8192, 4096], "pct_copy": 76.8},
            {"kernel": kernel, "shape": [16384, 4096], "pct_copy": 84.6},
            {"kernel": quant.same_bytes_copy(kernel), "shape": [8192, 4096], "pct_copy": 96.0},
            {"kernel": quant.same_bytes_copy(kernel), "shape": [16384, 4096], "pct_copy": 90.0}]
    assert quant.summary(rows) == [f"{kernel}: >= 80% of copy on 1 of 2 shapes (76.8-84.6%); a copy of the same "
                                   "bytes 90.0-96.0%, the kernel 80.0-94.0% of it"]
    assert quant.summary(rows[:2]) == [f"{kernel}: >= 80% of copy on 1 of 2 shapes (76.8-84.6%)"]


def test_every_target_row_has_its_same_size_copy_on_every_shape():
    cases = quant._cases(sweep=False)
    for kernel in quant.TARGETS:
        own = {(shape, nbytes) for name, shape, *_, nbytes in cases if name == kernel}
        copies = {(shape, nbytes) for name, shape, *_, nbytes in cases if name == quant.same_bytes_copy(kernel)}
        assert own and own == copies


def test_the_summary_counts_the_shapes_a_requantizer_reaches_behind_its_dgrad():
    kernel = "requant fp8 -> blocks^T"
    rows = [{"kernel": kernel, "shape": [m, 4096], "pct_copy": p, "pct_copy_behind_dgrad": d}
            for m, p, d in ((8192, 74.1, 89.3), (16384, 83.0, 79.9))]
    assert quant.summary(rows) == [f"{kernel}: >= 80% of copy on 1 of 2 shapes (74.1-83.0%); behind its dgrad on 1 "
                                   "of 2 shapes (79.9-89.3%)"]


def test_only_the_requantizers_are_timed_again_behind_their_dgrad():
    names = quant.kernel_names(sweep=True)
    behind = {name for name in names if quant.in_backward(name)}
    assert {"requant fp8 -> tokens^T", "requant fp8 -> blocks^T", "requant blocks triton kernel"} <= behind
    assert not behind & {"1x128 act (triton)", "dy 1x128+tokens^T fused", quant.same_bytes_copy(
        "requant fp8 -> tokens^T")}


def test_a_requantizer_is_timed_again_behind_a_dgrad_gemm_of_its_shape(monkeypatch):
    """Behind dx [M, C] = Q(dy) [M, DGRAD_N] @ Q(W)^T [C, DGRAD_N]^T, on each of its input sets in turn: the kernel it
    follows in a linear's backward (`numerics.linear`), whose output, not a copy's, is what the L2 holds then."""
    monkeypatch.setattr(quant.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(quant, "copy_buffers", lambda nbytes: (torch.zeros(1), torch.zeros(1)))
    calls, shapes = [], []

    def dgrad(m, c):
        shapes.append((m, c))
        return lambda: calls.append("dgrad")

    monkeypatch.setattr(quant, "dgrad", dgrad)
    cases = [("requant fp8 -> tokens^T", (8, 128), lambda x: calls.append(x), lambda: ("kernel",), 8)]
    monkeypatch.setattr(quant, "_cases", lambda sweep: cases)
    monkeypatch.setattr(quant, "rotation", lambda make, nbytes: [make(), make()])
    outcomes = iter([[2.0], [4.0]])

    def time_cuda_turns(fns, *, inputs_rotation, **kwargs):
        for inputs in inputs_rotation:
            fns[0](*inputs)
            fns[1](*inputs)
        return [[1.0], next(outcomes)]

    monkeypatch.setattr(quant, "time_cuda_turns", time_cuda_turns)
    rows = quant.run(copy_gbps=1e-6)
    assert calls == ["kernel", "kernel", "dgrad", "kernel", "dgrad", "kernel"]  # behind copies, then the dgrad
    assert shapes == [(8, 128)]
    assert rows[0]["pct_copy"] == 2 * rows[0]["pct_copy_behind_dgrad"]


@pytest.mark.gpu
def test_the_dgrad_is_the_fp8_linears_own():
    """dx of the re-quantized activation's shape, and the bits of the FP8 linear's dgrad on the same operands."""
    from precision_engine.numerics import quantize as Q
    from precision_engine.numerics.capabilities import Gemm
    from precision_engine.numerics.gemm import fp8_gemm

    torch.manual_seed(5)
    dx = quant.dgrad(256, 384)()
    torch.manual_seed(5)
    dy = Q.quantize_rows_1xG(torch.randn(256, quant.DGRAD_N, device="cuda", dtype=torch.bfloat16),
                             PRESET_FORMATS["fp8_group_act"])
    wt = Q.quantize_blocks(torch.randn(384, quant.DGRAD_N, device="cuda", dtype=torch.bfloat16),
                           PRESET_FORMATS["fp8_block_weight"])
    assert dx.shape == (256, 384) and torch.equal(dx, fp8_gemm(dy, wt, gemm=Gemm.DGRAD))


def test_each_kernel_is_timed_behind_a_copy_of_its_bytes(monkeypatch):
    """Every timed call of a kernel follows a copy of as many bytes, on buffers of its own set: a kernel timed
    behind itself is timed in what it left behind (the ring, BENCHMARKS.md fifty-third session)."""
    monkeypatch.setattr(quant.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(quant, "copy_buffers", lambda nbytes: (torch.arange(nbytes // 2), torch.zeros(nbytes // 2)))
    calls = []
    cases = [("1x128 act (triton)", (8, 128), lambda x: calls.append(("kernel", x)), lambda: ("x",), 8)]
    monkeypatch.setattr(quant, "_cases", lambda sweep: cases)
    monkeypatch.setattr(quant, "rotation", lambda make, nbytes: [make() for _ in range(nbytes // 8)])

    def time_cuda_turns(fns, *, inputs_rotation, **kwargs):
        assert len(inputs_rotation) == 2  # sets of twice the kernel's bytes: its inputs and its copy's buffers
        for inputs in inputs_rotation:
            (src, dst) = inputs[1]
            fns[0](*inputs)
            calls.append(("copy", torch.equal(dst, src.float())))
            fns[1](*inputs)
        return [[1.0], [2.0]]

    monkeypatch.setattr(quant, "time_cuda_turns", time_cuda_turns)
    rows = quant.run(copy_gbps=1.0)
    assert calls[:4] == [("copy", True), ("kernel", "x"), ("copy", True), ("kernel", "x")]
    assert rows[0]["ms"] == 2.0
