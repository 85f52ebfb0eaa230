"""`precision bench ceiling --decode`'s arithmetic and wiring on the CPU (the timing itself runs on a GPU): the
FP8 weight's bytes, the read kernel (Triton's interpreter), the two ceilings against issue 12's 1.5x, the
verdict, and the loop at toy size."""

import pytest
import torch
from typer.testing import CliRunner

from precision_engine.bench import decode_ceiling as D
from precision_engine.cli.app import app


def test_weight_bytes_are_one_per_value_and_a_float_per_block():
    assert D.weight_bytes(4096, 4096) == 4096 * 4096 + 4 * 32 * 32
    assert D.weight_bytes(1000, 130) == 1000 * 130 + 4 * 8 * 2  # partial blocks count whole


def test_each_set_moves_the_weights_bytes_once_and_casts_x():
    make, timers, nbytes = D._decode_timers(384, 256, 16, "cpu")
    x, w, w8, partials, x8 = make()
    assert (x.shape, w.shape, x8.shape, x8.dtype) == ((16, 256), (384, 256), (16, 256), torch.float8_e4m3fn)
    assert w8.dtype == torch.uint8 and 0 <= w8.numel() - D.weight_bytes(384, 256) < 64 and w8.numel() % 64 == 0
    assert partials.numel() == D.read_programs(w8.numel() // 4)
    before = w8.clone()
    timers["copy_cast"](x, w, w8, partials, x8)  # the copy: the first half's bytes over the second's
    half = w8.numel() // 2
    assert torch.equal(w8[half:], before[:half]) and torch.equal(w8[:half], before[:half])
    assert torch.equal(x8.float(), x.to(torch.float8_e4m3fn).float())
    assert torch.equal(timers["bf16"](x, w), torch.nn.functional.linear(x, w))
    assert nbytes == 2 * 384 * 256 + w8.numel() + 3 * 16 * 256


@pytest.mark.parametrize("words", [16, 2048 * 4, 2048 * 4 * 3 + 48])
def test_the_read_kernel_loads_every_word(words):
    """Each program's word is the xor of its own span (the last span partial): every word loaded, none twice."""
    src = torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32)
    out = D.read_words(src, torch.empty(D.read_programs(words), dtype=torch.int32))
    span = D.READ_STEP_WORDS * D.READ_STEPS
    for program, word in enumerate(out.tolist()):
        expected = 0
        for value in src[program * span:(program + 1) * span].tolist():
            expected ^= value
        assert word == expected


@pytest.mark.parametrize("cast_ms, reachable", [(6.0, True), (7.0, False)])
def test_the_whole_linear_ceiling_judges_the_target(cast_ms, reachable):
    row = {"n": 4096, "k": 4096, "m": 1, "bf16_ms": 10.0, "read_ms": 5.0, "copy_ms": 5.5, "read_cast_ms": 9.0,
           "copy_cast_ms": cast_ms, "achieved": {"fp8_bi": 1.37}}
    c = D.ceilings(row)  # each ceiling takes the faster stand-in: the read alone, the copy with the cast
    assert c["stream_ms"] == 5.0 and c["stream_cast_ms"] == cast_ms
    assert c["weights_x"] == 2.0 and c["with_quant_x"] == pytest.approx(10.0 / cast_ms)
    assert c["target"] == 1.5 and c["reachable"] is reachable
    line = D.format_row({**row, "ceilings": c})
    assert "fp8_bi 1.37x" in line and "ceiling 2.00x" in line
    assert ("within reach" in line) is reachable and ("beyond" in line) is not reachable


def test_the_summary_counts_the_target_and_names_what_is_within_reach():
    def row(n, m, achieved, cast_ms):
        r = {"n": n, "k": 4096, "m": m, "bf16_ms": 10.0, "read_ms": 5.0, "copy_ms": 5.0, "read_cast_ms": cast_ms,
             "copy_cast_ms": cast_ms, "achieved": {"fp8_bi": achieved}}
        return {**r, "ceilings": D.ceilings(r)}

    rows = [row(4096, 1, 1.52, 6.0), row(4096, 48, 1.41, 6.0), row(1024, 1, 0.98, 7.0), row(6144, 64, 1.5, 6.5)]
    assert D.summary(rows) == ("target 1.50x: met on 2 of 4 rows; short and beyond the whole linear's ceiling on "
                               "1; short within reach on 1; 4096x4096 M = 48 (1.41x against 1.67x)")
    assert D.format_table(rows).splitlines()[-1] == D.summary(rows)


def test_the_loop_runs_end_to_end_at_toy_size_on_the_cpu():
    """The wiring at a toy size, eagerly on the CPU: not a measurement."""
    seen = []
    rows = D.bench_decode_ceiling(shapes=[(256, 128)], ms=[1, 16], reps=2, warmup=1, device="cpu", on_row=seen.append)
    assert [(r["n"], r["k"], r["m"]) for r in rows] == [(256, 128, 1), (256, 128, 16)] and seen == rows
    for row in rows:
        assert all(row[f"{kind}_ms"] > 0 for kind in D.KINDS) and row["achieved"]["fp8_bi"] > 0
        assert row["ceilings"]["weights_x"] == row["bf16_ms"] / min(row["read_ms"], row["copy_ms"])
    assert len(D.format_table(rows).splitlines()) == 4  # the header, two rows, the summary


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_decode_ceiling_without_gpu_is_one_clear_error():
    result = CliRunner().invoke(app, ["bench", "ceiling", "--decode", "--quick"])
    assert result.exit_code == 2 and "needs a CUDA GPU" in result.output and "Traceback" not in result.output


def test_cli_tokens_pick_the_rows_of_either_ceiling(monkeypatch):
    """--tokens reaches the decode loop as its M list (the target is M = 1 .. 64, the default three of them), and
    the training one's without --decode."""
    import precision_engine.bench.ceiling as ceiling
    import precision_engine.cli.bench as cli_bench

    seen = []
    monkeypatch.setattr(D, "bench_decode_ceiling", lambda **kwargs: seen.append(("decode", kwargs["ms"])) or [])
    monkeypatch.setattr(ceiling, "bench_ceiling", lambda **kwargs: seen.append(("train", kwargs["ms"])) or [])
    monkeypatch.setattr(cli_bench, "require_gpu", lambda out, verb: None)
    for args in (["--decode", "--tokens", "24,40,48,56"], ["--tokens", "4096"], ["--decode"]):
        result = CliRunner().invoke(app, ["bench", "ceiling", *args])
        assert result.exit_code == 0, result.output
    assert seen == [("decode", (24, 40, 48, 56)), ("train", (4096,)), ("decode", None)]


@pytest.mark.parametrize("args, message", [
    (["--tokens", "48"], "the training ceiling takes more than 64 tokens"),
    (["--decode", "--tokens", "16,65"], "the decode ceiling takes 1 to 64 tokens"),
    (["--decode", "--tokens", "1,x"], "expected comma-separated positive token counts"),
])
def test_cli_tokens_refuses_what_is_not_a_decode_size_in_one_line(args, message):
    result = CliRunner().invoke(app, ["bench", "ceiling", *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_quick_run_on_the_gpu():
    """Graphed: half the bytes cannot take longer to stream than BF16's GEMM takes to read twice as many."""
    (row,) = D.bench_decode_ceiling(shapes=[(4096, 4096)], ms=[1], reps=5, warmup=2)
    c = row["ceilings"]
    assert 1.0 < c["weights_x"] < 3.0 and c["stream_cast_ms"] > c["stream_ms"]
    assert row["achieved"]["fp8_bi"] > 0
