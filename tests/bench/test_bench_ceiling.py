"""`precision bench ceiling`'s arithmetic (the timing itself runs on the H200): the quantizer byte floor and the
ceilings against issue 12's targets."""

import pytest
import torch
from typer.testing import CliRunner

from precision_engine.bench import ceiling as C
from precision_engine.cli.app import app
from precision_engine.errors import UnsupportedError


def test_quantizer_bytes_count_each_tensor_the_dataflow_moves():
    n, k, m = 4096, 1024, 256
    got = C.quantizer_bytes(n, k, m)
    x = 2 * m * k + m * k + 4 * m * (k // 128)  # BF16 x in; Q(x) and one fp32 scale per 128 out
    w = 2 * n * k + 2 * n * k + 2 * 4 * (n // 128) * (k // 128)  # W in; Q(W) and Q(W)^T with block scales out
    dy = 2 * m * n + 2 * m * n + 2 * 4 * m * (n // 128)  # dy in once; both layouts out
    xt = 2 * (m * k + 4 * m * (k // 128))  # Q(x) in; along tokens out
    assert got == {"fwd": x, "fwd+bwd": x + w + dy + xt}
    assert C.quantizer_bytes(100, 130, 3)["fwd"] == 2 * 3 * 130 + 3 * 130 + 4 * 3 * 2  # ragged: scales round up


def test_problems_are_the_steps_three_gemms():
    assert C.problems(14336, 4096, 8192) == {"fprop": (8192, 14336, 4096), "dgrad": (8192, 4096, 14336),
                                            "wgrad": (14336, 4096, 8192)}


def _row(n, k, bf16, fp8, gbps=4000.0, blocks=None):
    row = {"n": n, "k": k, "m": 8192, "copy_gbps": gbps}
    row.update({f"{p}_bytes": b for p, b in C.quantizer_bytes(n, k, 8192).items()})
    for g, b, f in zip(C.GEMMS, bf16, fp8):
        row[f"bf16_{g}_ms"], row[f"fp8_{g}_ms"] = b, f
    for g, ms in zip(C.GEMMS, blocks or ()):
        row[f"blocks_{g}_ms"] = ms
    return row


def test_ceilings_add_quantizer_time_and_judge_the_gemm_only_ratio():
    got = C.ceilings(_row(4096, 4096, (1.0, 1.0, 1.0), (0.7, 0.6, 0.7), gbps=4000.0))
    assert got["fwd"]["gemm_x"] == pytest.approx(1 / 0.7)
    step_bytes = C.quantizer_bytes(4096, 4096, 8192)["fwd+bwd"]
    assert got["fwd+bwd"]["with_quant_x"] == pytest.approx(3.0 / (2.0 + step_bytes / 4000e9 * 1e3))  # s -> ms
    assert got["fwd"]["target"] == 1.45 and not got["fwd"]["reachable"]  # 1.43x GEMMs-only < 1.45
    assert got["fwd+bwd"]["gemm_x"] == pytest.approx(1.5) and got["fwd+bwd"]["reachable"]
    mlp = C.ceilings(_row(14336, 4096, (1.0, 1.0, 1.0), (0.7, 0.6, 0.7)))
    assert mlp["fwd+bwd"]["target"] == 1.6 and not mlp["fwd+bwd"]["reachable"]  # 1.5x GEMMs-only < 1.6


def test_the_block_scaled_ceiling_judges_with_the_quantizers_bytes():
    """Per-tensor FP8 leaves 1.6x within reach (1.67x GEMMs only), cuBLAS's block-scaled GEMMs do not (1.5x
    GEMMs only, less with the quantizers): the verdict names the block-scaled GEMMs."""
    row = _row(14336, 4096, (1.0, 1.0, 1.0), (0.6, 0.6, 0.6), blocks=(0.65, 0.65, 0.7))
    got = C.ceilings(row)["fwd+bwd"]
    step_ms = C.quantizer_bytes(14336, 4096, 8192)["fwd+bwd"] / 4000e6
    assert got["reachable"] and got["blocks_gemm_x"] == pytest.approx(1.5)
    assert got["blocks_with_quant_x"] == pytest.approx(3.0 / (2.0 + step_ms)) and not got["blocks_reachable"]
    assert "beyond cuBLAS's block-scaled GEMMs" in C.format_row({**row, "ceilings": C.ceilings(row)})
    fast = C.ceilings(_row(14336, 4096, (1.0, 1.0, 1.0), (0.5, 0.5, 0.5), blocks=(0.55, 0.55, 0.55)))
    assert fast["fwd+bwd"]["blocks_reachable"]


def test_a_gpu_without_block_scaled_gemms_keeps_the_per_tensor_ceiling(monkeypatch):
    """Where the block-scaled GEMM cannot run (cuBLAS's blockwise scaling needs Hopper), the row keeps the other
    families, says why in a note, and judges the target against the per-tensor ceiling."""
    real = C._gemm_timers

    def no_blocks(gemm, n, k, m, device):
        make, timers, nbytes = real(gemm, n, k, m, device)

        def refuse(*_):
            raise UnsupportedError("kernel cublas needs a CUDA GPU of compute capability 9.0+ (Hopper)")

        return make, {**timers, "blocks": refuse}, nbytes

    monkeypatch.setattr(C, "_gemm_timers", no_blocks)
    (row,) = C.bench_ceiling(shapes=[(256, 128)], ms=[256], reps=1, warmup=0, device="cpu")
    assert "blocks_fprop_ms" not in row and "Hopper" in row["blocks_note"]
    assert "blocks_gemm_x" not in row["ceilings"]["fwd"] and row["ceilings"]["fwd"]["gemm_x"] > 0
    line = C.format_row(row)
    assert "block-scaled" not in line and "blocks: UnsupportedError" in line and "ceiling " in line


def test_the_verdict_names_the_ceiling_a_target_is_beyond():
    assert C._verdict({"reachable": True, "blocks_reachable": True}) == "within reach"
    assert C._verdict({"reachable": True, "blocks_reachable": False}) == "beyond cuBLAS's block-scaled GEMMs"
    assert C._verdict({"reachable": False, "blocks_reachable": False}) == "beyond cuBLAS's own FP8"
    assert C._verdict({"reachable": False}) == "beyond cuBLAS's own FP8"
    assert C._verdict({"blocks_reachable": False}) == "beyond cuBLAS's block-scaled GEMMs"
    assert C._verdict({"target": 1.45}) == "not judged"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_ceiling_without_gpu_is_one_clear_error():
    result = CliRunner().invoke(app, ["bench", "ceiling", "--quick"])
    assert result.exit_code == 2 and "needs a CUDA GPU" in result.output and "Traceback" not in result.output


def test_the_loop_runs_end_to_end_at_toy_size_on_the_cpu():
    """The wiring (timers, layouts, bytes, ceilings, table) at a toy size on the CPU: not a measurement."""
    rows = C.bench_ceiling(shapes=[(256, 128)], ms=[256], reps=2, warmup=1, device="cpu")
    (row,) = rows
    assert all(row[f"{kind}_{g}_ms"] > 0 for kind in ("bf16", *C.FP8_KINDS) for g in C.GEMMS) and row["copy_gbps"] > 0
    assert row["ceilings"]["fwd+bwd"]["blocks_with_quant_x"] > 0
    assert set(row["ceilings"]) == {"fwd", "fwd+bwd"} and row["fwd_bytes"] == C.quantizer_bytes(256, 128, 256)["fwd"]
    assert row["achieved"]["fwd"]["fp8_bi"] > 0 and row["achieved"]["fwd+bwd"]["fp8_bi"] > 0  # no cuBLAS on a CPU
    table = C.format_table(rows)
    assert "256x128" in table and "target 1.45x" in table and row["fp8_wgrad_tflops"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_quick_run_on_the_gpu():
    rows = C.bench_ceiling(quick=True, reps=3, warmup=1)
    assert len(rows) == 2 and all(r["ceilings"]["fwd+bwd"]["gemm_x"] > 0 for r in rows)
    assert all(set(r["achieved"]["fwd+bwd"]) == set(C.ACHIEVED) for r in rows)
