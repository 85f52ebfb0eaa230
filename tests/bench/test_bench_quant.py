"""`python -m precision_engine.bench.quant` prints each row as it is measured (a run cut short keeps the rows it
measured on screen) and writes its JSON whole at the end; the rows and the table agree. CPU: the GPU timing is
replaced by fixed times, the cases by two."""

import json

import pytest

from precision_engine.bench import quant


@pytest.fixture
def fake_gpu(monkeypatch):
    """Two cases, 4 MB in 2 us and 2 MB in 4 us against a 4000 GB/s copy; `printed` collects print's lines and
    `printed_before` how many there were as each case began its timing."""
    printed, printed_before = [], []
    monkeypatch.setattr("builtins.print", lambda line, **kwargs: printed.append(line))
    monkeypatch.setattr(quant.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(quant.torch.cuda, "get_device_name", lambda: "FakeGPU")
    monkeypatch.setattr(quant, "copy_bandwidth", lambda: 4000.0)
    cases = [("1x128", (8, 128), None, None, 4_000_000), ("requant fp8 -> tokens^T", (8, 128), None, None, 2_000_000)]
    monkeypatch.setattr(quant, "_cases", lambda sweep: cases)
    monkeypatch.setattr(quant, "rotation", lambda make, nbytes: [])
    times = iter([[0.002], [0.004]])

    def time_cuda(*args, **kwargs):
        printed_before.append(len(printed))
        return next(times)

    monkeypatch.setattr(quant, "time_cuda", time_cuda)
    return printed, printed_before


def test_rows_print_as_measured_and_the_json_holds_them(fake_gpu, tmp_path):
    printed, printed_before = fake_gpu
    out = tmp_path / "q.json"
    quant.main(["--json", str(out)])
    doc = json.loads(out.read_text())
    assert [r["kernel"] for r in doc["rows"]] == ["1x128", "requant fp8 -> tokens^T"]
    assert [r["gbps"] for r in doc["rows"]] == [2000.0, 500.0]
    assert [r["pct_copy"] for r in doc["rows"]] == [50.0, 12.5]
    assert printed_before == [1, 2]  # the header before the first timing, the first row before the second
    assert printed[0].startswith("FakeGPU") and "device copy 4000 GB/s" in printed[0]
    assert printed[1:3] == [quant.table_row(r) for r in doc["rows"]]
    assert printed[3] == "requant fp8 -> tokens^T: >= 80% of copy on 0 of 1 shapes (12.5-12.5%)"  # a target's row
    assert quant.format_table(doc).splitlines() == printed[0].splitlines() + printed[1:]


def test_the_summary_counts_the_shapes_that_reach_each_target():
    rows = [{"kernel": "requant fp8 -> tokens^T", "pct_copy": p} for p in (59.4, 81.0, 68.2)]
    rows += [{"kernel": "1x128 act (triton)", "pct_copy": 85.5}, {"kernel": "requant c32 x1 v4 w2", "pct_copy": 90.0}]
    assert quant.summary(rows) == ["1x128 act (triton): >= 80% of copy on 1 of 1 shapes (85.5-85.5%)",
                                   "requant fp8 -> tokens^T: >= 80% of copy on 1 of 3 shapes (59.4-81.0%)"]


def test_filter_keeps_only_the_named_kernels(fake_gpu):
    seen = []
    result = quant.run(only=("requant",), on_row=seen.append)
    assert [r["kernel"] for r in result["rows"]] == ["requant fp8 -> tokens^T"] and seen == result["rows"]
