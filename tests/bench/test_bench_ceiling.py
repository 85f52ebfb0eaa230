"""`precision bench ceiling`'s arithmetic (the timing itself runs on the H200): the quantizer byte floor and the
ceilings against issue 12's targets; and its DeepGEMM family's wiring (CPU: a stand-in Hopper and deep_gemm)."""

import sys
import types

import pytest
import torch
from typer.testing import CliRunner

from precision_engine.bench import ceiling as C
from precision_engine.cli.app import app
from precision_engine.errors import UnsupportedError
from precision_engine.numerics.capabilities import DeviceInfo, Gemm
from precision_engine.numerics.formats import Kernel


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


def _row(n, k, bf16, fp8, gbps=4000.0, blocks=None, deep_gemm=None):
    row = {"n": n, "k": k, "m": 8192, "copy_gbps": gbps}
    row.update({f"{p}_bytes": b for p, b in C.quantizer_bytes(n, k, 8192).items()})
    for g, b, f in zip(C.GEMMS, bf16, fp8):
        row[f"bf16_{g}_ms"], row[f"fp8_{g}_ms"] = b, f
    for kind, times in (("blocks", blocks), ("deep_gemm", deep_gemm)):
        for g, ms in zip(C.GEMMS, times or ()):
            row[f"{kind}_{g}_ms"] = ms
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
    assert got["fastest_with_quant_x"] == got["blocks_with_quant_x"] and not got["fastest_reachable"]
    line = C.format_row({**row, "ceilings": C.ceilings(row)})
    assert "beyond the block-scaled GEMMs measured here (cuBLAS)" in line and "DeepGEMM" not in line
    fast = C.ceilings(_row(14336, 4096, (1.0, 1.0, 1.0), (0.5, 0.5, 0.5), blocks=(0.55, 0.55, 0.55)))
    assert fast["fwd+bwd"]["blocks_reachable"]


def test_a_gpu_without_block_scaled_gemms_keeps_the_per_tensor_ceiling(monkeypatch):
    """Where the block-scaled GEMM cannot run (cuBLAS's blockwise scaling needs Hopper), the row keeps the other
    families, says why in a note, and judges the target against the per-tensor ceiling."""
    _refuse(monkeypatch, "blocks",
            UnsupportedError("kernel cublas needs a CUDA GPU of compute capability 9.0+ (Hopper)"))
    (row,) = C.bench_ceiling(shapes=[(256, 128)], ms=[256], reps=1, warmup=0, device="cpu")
    assert "blocks_fprop_ms" not in row and "Hopper" in row["blocks_note"]
    assert "blocks_gemm_x" not in row["ceilings"]["fwd"] and row["ceilings"]["fwd"]["gemm_x"] > 0
    line = C.format_row(row)
    assert "block-scaled" not in line and "blocks: UnsupportedError" in line and "ceiling " in line


def test_the_verdict_names_the_ceiling_a_target_is_beyond():
    both, cublas = ["blocks", "deep_gemm"], ["blocks"]
    assert C._verdict({"reachable": True, "fastest_reachable": True, "fastest_among": cublas}) == "within reach"
    assert C._verdict({"reachable": True, "fastest_reachable": False, "fastest_among": cublas}) \
        == "beyond the block-scaled GEMMs measured here (cuBLAS)"
    assert C._verdict({"reachable": True, "fastest_reachable": False, "fastest_among": both}) \
        == "beyond the block-scaled GEMMs measured here (cuBLAS, DeepGEMM)"
    assert C._verdict({"reachable": False, "fastest_reachable": False, "fastest_among": both}) \
        == "beyond cuBLAS's own FP8 and the block-scaled GEMMs measured here (cuBLAS, DeepGEMM)"
    assert C._verdict({"fastest_reachable": False, "fastest_among": ["deep_gemm"]}) \
        == "beyond the block-scaled GEMMs measured here (DeepGEMM)"
    assert C._verdict({"reachable": False}) == "beyond cuBLAS's own FP8"
    assert C._verdict({"target": 1.45}) == "not judged"


def test_the_verdict_judges_by_the_fastest_block_scaled_ceiling_not_cublas_alone():
    cell = {"reachable": True, "blocks_reachable": False, "deep_gemm_reachable": False, "fastest_reachable": True,
            "fastest_among": ["blocks", "deep_gemm"]}
    assert C._verdict(cell) == "within reach"


def test_the_fastest_ceiling_takes_each_gemms_fastest_block_scaled_kind():
    row = _row(4096, 4096, (1.0, 1.0, 1.0), (0.6, 0.6, 0.6), blocks=(0.7, 0.7, 0.8), deep_gemm=(0.6, 0.65, 0.85))
    got = C.ceilings(row)
    step_ms = C.quantizer_bytes(4096, 4096, 8192)["fwd+bwd"] / 4000e6
    step = got["fwd+bwd"]
    assert step["fastest_kinds"] == {"fprop": "deep_gemm", "dgrad": "deep_gemm", "wgrad": "blocks"}
    assert step["fastest_gemm_x"] == pytest.approx(3.0 / (0.6 + 0.65 + 0.8))
    assert step["fastest_with_quant_x"] == pytest.approx(3.0 / (0.6 + 0.65 + 0.8 + step_ms))
    assert step["blocks_gemm_x"] == pytest.approx(3.0 / 2.2) and step["deep_gemm_gemm_x"] == pytest.approx(3.0 / 2.1)
    assert step["fastest_among"] == ["blocks", "deep_gemm"] and "deep_gemm_reachable" in step
    assert got["fwd"]["fastest_kinds"] == {"fprop": "deep_gemm"}
    assert got["fwd"]["fastest_gemm_x"] == pytest.approx(1 / 0.6)
    slower = C.ceilings(_row(4096, 4096, (1.0, 1.0, 1.0), (0.6, 0.6, 0.6), blocks=(0.7, 0.7, 0.8),
                             deep_gemm=(0.9, 0.9, 0.9)))["fwd+bwd"]  # measured, won nothing: still named
    assert set(slower["fastest_kinds"].values()) == {"blocks"} and slower["fastest_among"] == ["blocks", "deep_gemm"]


def test_a_family_that_ran_part_of_the_step_still_counts_where_it_ran():
    """DeepGEMM timed for fprop and dgrad only (its wgrad refused): no DeepGEMM ceiling for the step, but the
    fastest takes its fprop and dgrad, and the verdict names it among the GEMMs measured."""
    row = _row(4096, 4096, (1.0, 1.0, 1.0), (0.5, 0.5, 0.5), blocks=(0.7, 0.7, 0.8), deep_gemm=(0.6, 0.6))
    step = C.ceilings(row)["fwd+bwd"]
    assert "deep_gemm_gemm_x" not in step and step["fastest_gemm_x"] == pytest.approx(3.0 / 2.0)
    assert step["fastest_kinds"] == {"fprop": "deep_gemm", "dgrad": "deep_gemm", "wgrad": "blocks"}
    assert C._verdict(step).endswith("(cuBLAS, DeepGEMM)")


def _mlp_row(deep_gemm):
    """14336x4096 (target 1.6): cuBLAS's block-scaled step 1.39x BF16 with the quantizers' bytes."""
    return _row(14336, 4096, (2.0, 2.0, 2.0), (0.9, 0.9, 0.9), blocks=(1.3, 1.3, 1.5), deep_gemm=deep_gemm)


def test_deep_gemm_can_bring_the_target_within_reach():
    """Neither family alone reaches 1.6x (cuBLAS 1.39x, DeepGEMM 1.57x with the quantizers); DeepGEMM's fprop
    and dgrad with cuBLAS's wgrad do (1.61x)."""
    row = _mlp_row(deep_gemm=(1.0, 1.0, 1.6))
    step = C.ceilings(row)["fwd+bwd"]
    assert not step["blocks_reachable"] and not step["deep_gemm_reachable"] and step["fastest_reachable"]
    assert step["fastest_with_quant_x"] == pytest.approx(6.0 / (3.5 + C.quantizer_bytes(14336, 4096, 8192)["fwd+bwd"]
                                                                 / 4000e6))
    assert "target 1.60x within reach" in C.format_row({**row, "ceilings": C.ceilings(row)})


def test_a_target_beyond_deep_gemm_too_names_both_families():
    row = _mlp_row(deep_gemm=(1.2, 1.2, 1.6))  # fastest 1.46x with the quantizers' bytes
    line = C.format_row({**row, "ceilings": C.ceilings(row)})
    assert "target 1.60x beyond the block-scaled GEMMs measured here (cuBLAS, DeepGEMM)" in line
    fwd_bwd = line.split(" | ")[1]
    assert "block-scaled 1.54x / 1.46x (fprop DeepGEMM, dgrad DeepGEMM, wgrad cuBLAS; cuBLAS 1.46x / 1.39x; " \
        "DeepGEMM 1.50x / 1.42x)" in fwd_bwd


@pytest.fixture
def deep_gemm_device(monkeypatch):
    """Install a stand-in deep_gemm package recording each fp8_gemm_nt call and a stand-in device, Hopper with
    DeepGEMM unless told otherwise; returns install(deep_gemm, capability) -> the calls."""
    from precision_engine.numerics import gemm

    calls = []
    fake = types.ModuleType("deep_gemm")

    def fp8_gemm_nt(a, b, d, c=None, recipe=None):
        assert a[0].shape[1] == b[0].shape[1] and d.shape == (a[0].shape[0], b[0].shape[0])
        calls.append({"d": d, "c": c, "recipe": recipe})

    fake.fp8_gemm_nt = fp8_gemm_nt
    monkeypatch.setitem(sys.modules, "deep_gemm", fake)

    def install(deep_gemm=True, capability=(9, 0)):
        info = DeviceInfo("cuda", capability=capability, cublas_blockwise=True, deep_gemm=deep_gemm)
        monkeypatch.setattr(gemm, "device_info", lambda device: info)
        return calls
    return install


def test_deep_gemm_runs_fprop_and_dgrad_by_name_and_accumulates_wgrad_in_fp32(deep_gemm_device, monkeypatch):
    from precision_engine.numerics import gemm

    calls = deep_gemm_device()
    named, real = [], gemm.fp8_gemm

    def recording_fp8_gemm(a, b, **kw):
        named.append((kw["kernel"], kw["gemm"]))
        return real(a, b, **kw)

    monkeypatch.setattr(gemm, "fp8_gemm", recording_fp8_gemm)
    n, k, m = 256, 128, 256
    for g in C.GEMMS:
        make, timers, nbytes = C._gemm_timers(g, n, k, m, "cpu")
        s = make()
        timers["deep_gemm"](*s)
        timers["deep_gemm"](*s)
    assert named == [(Kernel.DEEP_GEMM, Gemm.FPROP)] * 2 + [(Kernel.DEEP_GEMM, Gemm.DGRAD)] * 2
    fprop, _, dgrad, _, wgrad, again = calls
    assert fprop["c"] is None and fprop["recipe"] is None and fprop["d"].dtype == torch.bfloat16
    assert fprop["d"].shape == (m, n) and dgrad["c"] is None and dgrad["d"].shape == (m, k)
    assert wgrad["c"] is wgrad["d"] and wgrad["d"].dtype == torch.float32 and wgrad["d"].shape == (n, k)
    assert wgrad["recipe"] == (1, 1, 128)
    assert again["d"] is wgrad["d"] is s[-1]  # one FP32 dW per input set, accumulated into at every call
    assert nbytes == 4 * (n + k) * m + 4 * n * k  # the rotation counts it
    assert C._deep_gemm_note("cpu") is None


@pytest.mark.parametrize(("deep_gemm", "capability", "why"), [
    (False, (9, 0), "the deep_gemm package (DeepGEMM 2.x, with fp8_gemm_nt) does not import here"),
    (True, (10, 0), "need a Hopper GPU (compute capability 9.0), this device: compute capability 10.0"),
])
def test_without_deep_gemm_its_kind_is_absent_and_the_note_says_why(deep_gemm_device, deep_gemm, capability, why):
    calls = deep_gemm_device(deep_gemm=deep_gemm, capability=capability)
    for g in C.GEMMS:
        make, timers, nbytes = C._gemm_timers(g, 256, 128, 256, "cpu")
        assert set(timers) == {"bf16", "fp8", "blocks"} and make()[-1] is None
        assert nbytes == 4 * sum(C.problems(256, 128, 256)[g][:2]) * C.problems(256, 128, 256)[g][2]
    assert why in C._deep_gemm_note("cpu") and not calls


def test_a_deep_gemm_that_fails_gets_a_note_and_the_others_run(monkeypatch):
    """An install that cannot compile its kernels (no nvcc at run time) raises RuntimeError: the row says so, and
    the fastest ceiling is cuBLAS's alone."""
    _refuse(monkeypatch, "deep_gemm", RuntimeError("NVCC compilation failed"))
    monkeypatch.setattr(C, "_deep_gemm_note", lambda device: None)
    (row,) = C.bench_ceiling(shapes=[(256, 128)], ms=[256], reps=1, warmup=0, device="cpu")
    assert row["deep_gemm_note"] == "RuntimeError: NVCC compilation failed" and "deep_gemm_fprop_ms" not in row
    assert row["ceilings"]["fwd+bwd"]["fastest_among"] == ["blocks"] and row["blocks_wgrad_ms"] > 0
    line = C.format_row(row)
    assert "deep_gemm: RuntimeError: NVCC" in line and "DeepGEMM" not in line


def test_the_summary_counts_each_pass_and_names_what_is_within_reach():
    """Per pass of the batch-invariant linear, eager and graphed: met, short beyond the ceiling, short within
    reach (named with the ceiling it is judged by); the per-row line shows the graphed ratios too."""
    def row(n, achieved, blocks):
        r = _row(n, 4096, (1.0, 1.0, 1.0), (0.6, 0.6, 0.6), blocks=blocks)
        r["achieved"] = {p: {"fp8_cublas": x + 0.01, "fp8_bi": x} for p, x in achieved.items()}
        return {**r, "ceilings": C.ceilings(r)}

    fast, slow = (0.6, 0.6, 0.6), (0.7, 0.7, 0.7)  # block-scaled: 1.67x / 1.43x GEMMs only
    rows = [row(4096, {"fwd": 1.50, "fwd+bwd": 1.40, "fwd/graph": 1.52, "fwd+bwd/graph": 1.46}, fast),
            row(14336, {"fwd": 1.40, "fwd+bwd": 1.35, "fwd/graph": 1.41, "fwd+bwd/graph": 1.38}, slow)]
    mlp = rows[1]["ceilings"]["fwd+bwd"]
    assert not mlp["fastest_reachable"] and rows[0]["ceilings"]["fwd+bwd"]["fastest_reachable"]
    within = rows[0]["ceilings"]["fwd+bwd"]["fastest_with_quant_x"]
    assert C.summary(rows) == [
        "fp8_bi fwd: target met on 1 of 2 rows; short and beyond the ceiling on 1; short within reach on 0",
        f"fp8_bi fwd+bwd: target met on 0 of 2 rows; short and beyond the ceiling on 1; short within reach on 1; "
        f"4096x4096 M = 8192 (1.40x against {within:.2f}x)",
        "fp8_bi fwd/graph: target met on 1 of 2 rows; short and beyond the ceiling on 1; short within reach on 0",
        "fp8_bi fwd+bwd/graph: target met on 1 of 2 rows; short and beyond the ceiling on 1; short within reach "
        "on 0"]
    table = C.format_table(rows).splitlines()
    assert table[-4:] == C.summary(rows)
    assert "fwd+bwd: fp8_cublas 1.41x, fp8_bi 1.40x; graphed fp8_cublas 1.47x, fp8_bi 1.46x;" in table[1]


def test_a_pass_no_fp8_gemm_ran_is_counted_short_and_not_judged():
    r = {"n": 4096, "k": 4096, "m": 8192, "achieved": {"fwd": {"fp8_bi": 1.2}},
         "ceilings": {"fwd": {"target": 1.45}, "fwd+bwd": {"target": 1.45}}}
    assert C.summary([r]) == ["fp8_bi fwd: target met on 0 of 1 rows; short and beyond the ceiling on 0; short "
                              "within reach on 0; short, not judged, on 1"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_ceiling_without_gpu_is_one_clear_error():
    result = CliRunner().invoke(app, ["bench", "ceiling", "--quick"])
    assert result.exit_code == 2 and "needs a CUDA GPU" in result.output and "Traceback" not in result.output


def test_the_loop_runs_end_to_end_at_toy_size_on_the_cpu():
    """The wiring (timers, layouts, bytes, ceilings, table) at a toy size on the CPU, over two shapes as --quick
    runs them (the second once met a name the first row's timing had rebound): not a measurement."""
    rows = C.bench_ceiling(shapes=[(256, 128), (128, 256)], ms=[256], reps=2, warmup=1, device="cpu")
    assert [(r["n"], r["k"]) for r in rows] == [(256, 128), (128, 256)]
    row = rows[0]
    assert all(row[f"{kind}_{g}_ms"] > 0 for kind in ("bf16", "fp8", "blocks") for g in C.GEMMS)
    assert row["copy_gbps"] > 0
    assert row["ceilings"]["fwd+bwd"]["blocks_with_quant_x"] > 0
    assert row["ceilings"]["fwd+bwd"]["fastest_kinds"] == dict.fromkeys(C.GEMMS, "blocks")
    assert "deep_gemm_fprop_ms" not in row and "Hopper GPU" in row["deep_gemm_note"]  # no DeepGEMM on a CPU
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


def _refuse(monkeypatch, kind, error):
    """Every GEMM timer of `kind` raises `error`, as on a device or install that cannot run it."""
    real = C._gemm_timers

    def timers_refusing(gemm, n, k, m, device):
        make, timers, nbytes = real(gemm, n, k, m, device)

        def refuse(*_):
            raise error

        return make, {**timers, kind: refuse}, nbytes

    monkeypatch.setattr(C, "_gemm_timers", timers_refusing)
