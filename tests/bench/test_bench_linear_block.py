"""`bench block`, `bench linear` and the torchao adapter on the CPU: the layer the block bench times is the
decoder's own training forward (bitwise), the row builders run at toy size (variants that cannot run here leave
a note, the others run), the linear bench times torchao after ours on the same inputs and reports each row as it
is measured, the CLI runs `block --quick --device cpu`, writes `linear`'s JSON after every row and refuses what it
cannot do in one line."""

import importlib.util
import json
import sys
import tempfile

import pytest
import torch
from typer.testing import CliRunner

from precision_engine.bench import torchao_ref
from precision_engine.bench.block import bench_block, format_table
from precision_engine.bench.linear import bench_linear, choose_variants
from precision_engine.bench.linear import format_table as linear_table
from precision_engine.bench.linear import summary
from precision_engine.bench.rollout import random_decoder
from precision_engine.cli.app import app
from precision_engine.errors import UsageError
from precision_engine.models.decoder import _Ops
from precision_engine.models.loader import resolve_config
from precision_engine.numerics.kv_cache import KVScales
from precision_engine.numerics.specs import KVScale
from helpers import sqnr_db

runner = CliRunner()


@pytest.mark.parametrize("invariant", [False, True])
@pytest.mark.parametrize("fp8_kv", [False, True])
def test_layer_forward_is_the_decoders_training_forward(invariant, fp8_kv):
    """Embedding -> Decoder.layers (what bench block times) -> final norm + lm_head gives Decoder.forward's logits
    bit for bit (fresh random weights and ids, k/v rounded through FP8 or not), and leaves the model as it was."""
    model = random_decoder(resolve_config("tiny-llama"), device="cpu", seed=5, batch_invariant=invariant)
    c = model.config
    if fp8_kv:
        amax = 1.0 + torch.rand(2, c.num_layers, c.num_kv_heads)
        model.kv_scales = KVScales.from_amax(amax[0], amax[1], KVScale.PER_HEAD)
    ids = torch.randint(0, c.vocab_size, (3, 17), generator=torch.Generator().manual_seed(1))
    embed = model.model.embed_tokens
    with torch.no_grad():
        hidden = model.layers(embed(ids))
        logits = model._logits(hidden, _Ops(invariant))
        assert torch.equal(logits, model(ids))
    assert model.model.embed_tokens is embed and model.compute_dtype is None


def test_block_rows_at_toy_size(tmp_path, monkeypatch):
    """One layer of tiny-llama, two policies and a missing one, fast mode, 2 x 32 tokens: every row of the real
    policies has a time and ratios against bf16_baseline of the same run, the missing policy fails alone; the
    one-layer model's config.json is removed."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []
    rows = bench_block("tiny-llama", policies=("bf16_baseline", "jetrl_unified_kv", "no_such_policy"),
                       modes=("fast",), batch=2, seq=32, reps=1, warmup=0, device="cpu", on_row=seen.append)
    assert [(r["policy"], r["pass"]) for r in seen] == [  # each pass's rows once its turns are timed
        (p, s) for s in ("fwd", "fwd+bwd") for p in ("bf16_baseline", "jetrl_unified_kv", "no_such_policy")]
    assert sorted(map(id, seen)) == sorted(map(id, rows))
    assert [(r["policy"], r["pass"]) for r in rows] == [
        (p, s) for p in ("bf16_baseline", "jetrl_unified_kv", "no_such_policy") for s in ("fwd", "fwd+bwd")]
    good, bad = rows[:4], rows[4:]
    assert all(r["ms"] > 0 and r["tokens"] == 64 and "vs_bf16" in r and "vs_bf16_fast" in r for r in good), good
    assert [r["fp8_linears"] for r in good] == [0, 0, 7, 7]  # q, k, v, o, gate, up, down of the one layer
    assert rows[0]["vs_bf16"] == 1.0 and all("error" in r and "ms" not in r for r in bad)
    assert all(r["host_ms"] > 0 and r["gpu_ms"] > 0 for r in good)  # eager rows (no graphed ones on a CPU)
    table = format_table(rows)
    assert "1.00x" in table and "failed" in table and "host / GPU ms" in table
    assert all(r["device"] == "cpu" for r in rows) and table.endswith("the 1.35x target is judged on a GPU only")
    assert not list(tmp_path.rglob("config.json"))


def test_block_summary_judges_jetrl_unified_in_its_own_mode():
    from precision_engine.bench.block import summary

    rows = [{"policy": p, "mode": m, "pass": s, "ms": 1.0, "vs_bf16": x}
            for p, m, s, x in (("jetrl_unified", "batch-invariant", "fwd", 2.3),
                               ("jetrl_unified", "batch-invariant", "fwd+bwd", 1.45),
                               ("jetrl_unified", "batch-invariant", "fwd+bwd/graph", 1.30),
                               ("jetrl_unified", "fast", "fwd+bwd", 1.2), ("bf16_baseline", "batch-invariant",
                                                                           "fwd+bwd", 1.0))]
    assert summary(rows) == [
        "jetrl_unified fwd+bwd (batch-invariant): 1.45x the BF16 block, target 1.35x met",
        "jetrl_unified fwd+bwd/graph (batch-invariant): 1.30x the BF16 block, target 1.35x not met"]
    assert format_table(rows).splitlines()[-2:] == summary(rows)
    rows[1]["vs_bf16_fast"] = 1.21  # fast mode timed too: its BF16 block beside the target
    assert summary(rows)[0] == ("jetrl_unified fwd+bwd (batch-invariant): 1.45x the BF16 block, target 1.35x met; "
                                "1.21x the fast-mode BF16 block")
    failed = {k: v for k, v in rows[1].items() if k not in ("ms", "vs_bf16")} | {"error": "OutOfMemoryError"}
    assert summary([failed]) == []  # a step that failed has no ratio to judge
    cpu = [row | {"device": "cpu"} for row in rows]  # toy sizes on a CPU: no verdict from their times
    assert len(summary(cpu)) == 1 and "measure nothing" in summary(cpu)[0] and "met" not in summary(cpu)[0]


def test_block_policies_take_turns_call_by_call_and_rounds_pair_with_their_baseline(tmp_path, monkeypatch):
    """Each policy's layer is rewritten once; each pass times every layer in turns (one `timed_turns` call a pass
    and round, the layers in policy order); a row's ms is the median of its rounds, each round's ratio is against
    that round's baseline, the host is timed in the first round only, and the table prints each ratio's range."""
    import precision_engine.bench.block as block
    import precision_engine.bench.gemm as gemm

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    order, host_calls, turns = [], [], []
    rewrite = block._rewrite
    monkeypatch.setattr(block, "_rewrite", lambda *a: order.append(a[2]) or rewrite(*a))
    # per round: fwd (bf16_baseline, jetrl_unified), then fwd+bwd
    times = iter([[2.0, 1.0], [4.0, 2.0], [3.0, 1.0], [6.0, 4.0], [2.0, 2.0], [5.0, 2.5]])

    def timed_turns(fns, sets, **kwargs):
        turns.append(len(fns))
        return next(times)

    monkeypatch.setattr(gemm, "timed_turns", timed_turns)
    monkeypatch.setattr(block, "host_and_gpu_ms", lambda *a, **kw: host_calls.append(1) or (0.1, 0.2))
    seen = []
    rows = bench_block("tiny-llama", policies=("bf16_baseline", "jetrl_unified"), modes=("fast",), batch=1, seq=16,
                       reps=1, warmup=0, rounds=3, device="cpu", on_row=seen.append)
    assert order == ["bf16_baseline", "jetrl_unified"] and turns == [2] * 6 and len(host_calls) == 4
    assert len(seen) == len(rows) == 4
    step = rows[3]
    assert (step["policy"], step["pass"]) == ("jetrl_unified", "fwd+bwd")
    assert step["ms_rounds"] == [2.0, 4.0, 2.5] and step["ms"] == 2.5
    assert step["vs_bf16"] == 5.0 / 2.5 and step["vs_bf16_rounds"] == [2.0, 1.5, 2.0]
    assert rows[0]["vs_bf16_rounds"] == [1.0, 1.0, 1.0]
    table = format_table(rows)
    assert "by round" in table and "1.50-2.00x" in table
    with pytest.raises(block.UsageError, match="rounds 0: at least 1"):
        bench_block("tiny-llama", rounds=0, device="cpu")


def test_block_a_layer_failing_in_turns_fails_its_row_alone(tmp_path, monkeypatch):
    """A policy's step that raises while the layers take turns leaves its error in its rows; the others are timed
    without it and keep their ratios."""
    import precision_engine.bench.block as block

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    step = block._train_step

    def train_step(model, x, dy):
        if model.fp8_marker:
            raise RuntimeError("lost the card")
        step(model, x, dy)

    rewrite = block._rewrite

    def marking_rewrite(model, spec, policy, invariant, device):
        model.fp8_marker = policy == "jetrl_unified"
        return rewrite(model, spec, policy, invariant, device)

    monkeypatch.setattr(block, "_rewrite", marking_rewrite)
    monkeypatch.setattr(block, "_train_step", train_step)
    rows = bench_block("tiny-llama", policies=("bf16_baseline", "jetrl_unified"), modes=("fast",), batch=1, seq=16,
                       reps=1, warmup=0, device="cpu")
    by = {(r["policy"], r["pass"]): r for r in rows}
    assert by[("jetrl_unified", "fwd+bwd")]["error"] == "RuntimeError: lost the card"
    assert "ms" not in by[("jetrl_unified", "fwd+bwd")] and by[("jetrl_unified", "fwd")]["ms"] > 0
    assert by[("bf16_baseline", "fwd+bwd")]["vs_bf16"] == 1.0 and "vs_bf16" in by[("jetrl_unified", "fwd")]


def test_block_rejects_an_unknown_mode():
    from precision_engine.errors import UsageError

    with pytest.raises(UsageError, match="use fast or batch-invariant"):
        bench_block("tiny-llama", modes=("slow",), device="cpu")


def test_linear_rows_at_toy_size():
    """256 x 128 at 128 tokens (training: fwd and fwd+bwd) and 1 (decode): BF16 and the batch-invariant linear
    run, and it with x^T in blocks in the wgrad; the cuBLAS variant (Hopper only) and torchao (CUDA only) leave
    their reason; the table shows '-'. Every variant that ran, or failed on its first call, has that call's
    seconds; the table sums them."""
    rows = bench_linear(shapes=((256, 128),), ms=(128, 1), reps=1, warmup=0, device="cpu")
    assert [(r["m"], r["pass"]) for r in rows] == [(128, "fwd"), (128, "fwd+bwd"), (1, "fwd")]
    for r in rows:
        assert r["bf16_ms"] > 0 and r["fp8_bi_x"] == r["bf16_ms"] / r["fp8_bi_ms"]
        assert r["bf16_warmup_s"] > 0 and r["fp8_bi_warmup_s"] > 0
    train = rows[:2]
    assert all("fp8_cublas_ms" not in r and "CUDA" in r["fp8_cublas_note"] for r in train)
    assert all(r["fp8_cublas_warmup_s"] > 0 for r in train)
    assert all(r["torchao_note"].startswith("torchao") and "torchao_ms" not in r for r in train)
    assert "torchao_note" not in rows[2] and "fp8_cublas_warmup_s" not in rows[2]  # decode: the rollout path only
    assert all(r["fp8_bi_host_ms"] > 0 for r in train) and "fp8_bi_host_ms" not in rows[2]  # decode rows: graphed
    table = linear_table(rows)
    assert table.count("host / GPU ms: bf16 ") == 2
    assert "note (torchao): torchao" in table and " - " in table
    assert "first calls s (all rows): bf16 " in table and "fp8_bi " in table
    lines = summary(rows)  # fwd, fwd+bwd, decode; no torchao line: it did not run
    assert [line.split(":")[0] for line in lines] == ["fp8_bi fwd", "fp8_bi fwd+bwd", "fp8_bi decode"]
    blocked = summary(rows, "fp8_bi_wblocks")  # training rows only: its forward is fp8_bi's
    assert [line.split(":")[0] for line in blocked] == ["fp8_bi_wblocks fwd", "fp8_bi_wblocks fwd+bwd"]
    assert all(r["fp8_bi_wblocks_ms"] > 0 for r in train) and "fp8_bi_wblocks_ms" not in rows[2]
    assert table.splitlines()[-5:] == lines + blocked


def test_linear_variants_take_turns_and_rounds_pair_each_round_with_its_baseline(monkeypatch):
    """A row's variants are timed together, taking turns (`timed_turns`), once per round; each variant's ms is the
    median of its rounds, each round's ratio is against that round's BF16, first calls and the host are timed
    once, a variant failing in a later round leaves its note and no numbers while the others' round is timed
    again, and the table prints each ratio's range over the rounds."""
    import precision_engine.bench.gemm as gemm
    import precision_engine.bench.linear as linear

    turns, host_calls = [], []
    times = {"bf16": [2.0, 3.0, 2.2] * 2, "fp8_bi": [1.0, 2.0, 1.0] * 2, "fp8_bi_wblocks": [1.0, 1.5]}

    def lost(*args):
        raise RuntimeError("lost the card")

    def timed_turns(fns, sets, **kwargs):
        turns.append([fn.name for fn in fns])
        for fn in fns:
            if not times[fn.name]:  # its call fails while they take turns
                fn.fn = lost
                fn(*sets[0])
        return [times[fn.name].pop(0) for fn in fns]

    monkeypatch.setattr(gemm, "timed_turns", timed_turns)
    monkeypatch.setattr(linear, "host_and_gpu_ms", lambda *a, **kw: host_calls.append(1) or (0.1, 0.2))
    rows = bench_linear(shapes=((256, 128),), ms=(128,), reps=1, warmup=0, rounds=3,
                        variants=("fp8_bi", "fp8_bi_wblocks"), device="cpu")
    fwd = rows[0]
    every, two = ["bf16", "fp8_bi", "fp8_bi_wblocks"], ["bf16", "fp8_bi"]
    assert turns == [every, every, every, two] + [every, two, two, two]  # a failed turn is timed again without it
    assert len(host_calls) == 2 + 2  # once a row, after its rounds, for the variants still running
    assert fwd["bf16_ms_rounds"] == [2.0, 3.0, 2.2] and fwd["bf16_ms"] == 2.2
    assert fwd["fp8_bi_ms"] == 1.0 and fwd["fp8_bi_x"] == 2.2 and fwd["fp8_bi_x_rounds"] == [2.0, 1.5, 2.2]
    assert "fp8_bi_wblocks_ms" not in fwd and "fp8_bi_wblocks_ms_rounds" not in fwd
    assert fwd["fp8_bi_wblocks_note"] == "RuntimeError: lost the card" and fwd["fp8_bi_wblocks_warmup_s"] > 0
    assert "x by round: fp8_bi 1.50-2.20  host / GPU ms" in linear.format_row(fwd)
    assert rows[1]["pass"] == "fwd+bwd" and rows[1]["fp8_bi_wblocks_note"] == "RuntimeError: lost the card"
    monkeypatch.setattr(gemm, "timed_turns", lambda fns, sets, **kw: [1.0] * len(fns))
    single = bench_linear(shapes=((256, 128),), ms=(128,), reps=1, warmup=0, variants=("fp8_bi",), device="cpu")
    assert not any(key.endswith("_rounds") for key in single[0]) and "by round" not in linear.format_row(single[0])
    with pytest.raises(UsageError, match="rounds 0: at least 1"):
        bench_linear(rounds=0, device="cpu")


def test_timed_calls_take_turns_call_by_call():
    """`time_cuda_turns` (here on the host clock) warms up and times the functions in turns, each repetition on
    the next input set; `time_cuda` is its one-function case."""
    from precision_engine.bench.timing import time_cuda, time_cuda_turns

    calls = []
    fns = [lambda s, name=name: calls.append((name, s)) for name in "ab"]
    times = time_cuda_turns(fns, warmup=1, reps=3, inputs_rotation=[(0,), (1,)])
    assert calls == [("a", 0), ("b", 0), ("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 0), ("b", 0)]
    assert [len(own) for own in times] == [3, 3] and all(t >= 0 for own in times for t in own)
    calls.clear()
    assert len(time_cuda(fns[0], warmup=0, reps=2, inputs_rotation=[(5,)])) == 2 and calls == [("a", 5)] * 2


def test_linear_row_marks_a_variant_host_bound_where_issuing_outlasts_its_gpu_time():
    from precision_engine.bench.linear import format_row

    row = {"n": 4096, "k": 4096, "m": 8192, "pass": "fwd+bwd", "bf16_ms": 1.03, "bf16_x": 1.0,
           "bf16_host_ms": 0.24, "bf16_gpu_ms": 1.03, "fp8_bi_ms": 1.62, "fp8_bi_x": 0.64, "fp8_bi_host_ms": 1.75,
           "fp8_bi_gpu_ms": 0.82}
    line = format_row(row)
    assert line.endswith("host / GPU ms: bf16 0.240 / 1.030, fp8_bi 1.750 / 0.820 (host-bound)")
    assert "host" not in format_row({k: v for k, v in row.items() if "host" not in k and "gpu" not in k})


def test_linear_summary_judges_the_batch_invariant_linear_against_issue_12():
    """Per pass, decode rows apart: met against `gemm.target` (1.6x for the step on an MLP shape, 1.5x at decode
    sizes), the short rows named; then ahead of both torchao variants, a tie not counted ahead."""
    def row(n, m, pass_, ours, *torchao):
        r = {"n": n, "k": 4096, "m": m, "pass": pass_, "fp8_bi_x": ours}
        r.update({f"{v}_x": x for v, x in zip(("torchao", "torchao_triton"), torchao)})
        return r

    rows = [row(4096, 8192, "fwd", 1.57, 1.34, 1.40), row(4096, 8192, "fwd+bwd", 1.46, 1.13),
            row(14336, 8192, "fwd+bwd", 1.49, 1.39, 1.49), row(6144, 8192, "fwd+bwd/graph", 1.42, 1.44),
            row(4096, 1, "fwd", 1.52), row(4096, 64, "fwd", 1.26)]
    assert summary(rows) == [
        "fp8_bi fwd: target met on 1 of 1 rows",
        "fp8_bi fwd+bwd: target met on 1 of 2 rows; short: 14336x4096 M = 8192 1.49x of 1.60x",
        "fp8_bi fwd+bwd/graph: target met on 0 of 1 rows; short: 6144x4096 M = 8192 1.42x of 1.45x",
        "fp8_bi decode: target met on 1 of 2 rows; short: 4096x4096 M = 64 1.26x of 1.50x",
        "fp8_bi ahead of torchao on 2 of 4 rows; not ahead: 14336x4096 M = 8192 fwd+bwd 1.49x against 1.49x, "
        "6144x4096 M = 8192 fwd+bwd/graph 1.42x against 1.44x"]


def test_linear_variants_pick_the_columns_and_bf16_always_runs():
    rows = bench_linear(shapes=((256, 128),), ms=(128,), reps=1, warmup=0, variants=("fp8_bi",), device="cpu")
    columns = [sorted(k for k in r if k.endswith(("_ms", "_note")) and not k.endswith(("_host_ms", "_gpu_ms")))
               for r in rows]
    assert columns == [["bf16_ms", "fp8_bi_ms"]] * 2
    assert all(r[f"{v}_{t}_ms"] > 0 for r in rows for v in ("bf16", "fp8_bi") for t in ("host", "gpu"))
    assert choose_variants(["torchao", "fp8_bi"]) == ("bf16", "fp8_bi", "torchao")
    with pytest.raises(UsageError, match="unknown variant 'fp8': choose from bf16, fp8_cublas, fp8_bi, "
                                         "fp8_bi_pinned, fp8_bi_wblocks, torchao"):
        choose_variants(["fp8", "fp8_bi"])


def test_linear_times_torchao_after_ours_at_every_shape_on_the_same_inputs(monkeypatch):
    """With torchao runnable (faked by the BF16 Linear on the CPU): every row of ours is reported before any of
    torchao's, whose training rows are reported again with its columns, on input sets drawn bit for bit as
    they were for ours, its ratios against BF16 timed again beside it; the torchao check skips its trial run
    (minutes of autotuning on a fresh GPU)."""
    import precision_engine.bench.linear as linear

    trials, drawn, seen = [], [], []

    def unavailable(device, *, trial=True):
        trials.append(trial)

    def rotation(make, bytes_per_set):
        sets = real_rotation(make, bytes_per_set)
        drawn.append([(layers["bf16"].weight.clone(), x.detach().clone()) for layers, x, dy in sets])
        return sets

    real_rotation = linear.rotation
    monkeypatch.setattr(torchao_ref, "unavailable", unavailable)
    monkeypatch.setattr(torchao_ref, "blockwise_linear", lambda lin, use_triton: lin)
    monkeypatch.setattr(linear, "rotation", rotation)
    rows = bench_linear(shapes=((256, 128), (128, 256)), ms=(128, 1), reps=1, warmup=0,
                        variants=("fp8_bi", "torchao", "torchao_triton"), device="cpu",
                        on_row=lambda row, so_far: seen.append((row["k"], row["m"], row["pass"], "torchao_ms" in row)))
    assert trials == [False]
    ours = [(k, m, p, False) for k in (128, 256) for m, p in ((128, "fwd"), (128, "fwd+bwd"), (1, "fwd"))]
    assert seen == ours + [(k, 128, p, True) for k in (128, 256) for p in ("fwd", "fwd+bwd")]
    assert [(r["k"], r["m"], r["pass"]) for r in rows] == [s[:3] for s in ours]
    train = [r for r in rows if r["m"] == 128]
    assert all(r["fp8_bi_x"] == r["bf16_ms"] / r["fp8_bi_ms"] for r in train)
    assert all(r[f"{v}_x"] == r["bf16_beside_torchao_ms"] / r[f"{v}_ms"] for r in train
               for v in ("torchao", "torchao_triton"))  # each ratio against a BF16 timed beside it
    assert all(r["bf16_beside_torchao_ms"] != r["bf16_ms"] for r in train)
    assert all(r["torchao_warmup_s"] > 0 for r in rows if r["m"] == 128)
    assert len(drawn) == 6  # ours: 2 shapes x (128, 1); torchao's: 2 shapes x 128
    for ours_sets, theirs_sets in ((drawn[0], drawn[4]), (drawn[2], drawn[5])):
        assert len(ours_sets) == len(theirs_sets) >= 2
        assert all(torch.equal(a, b) for s, t in zip(ours_sets, theirs_sets) for a, b in zip(s, t))


def test_kernels_table_shows_torchao_as_a_dash_with_its_note():
    from precision_engine.bench.gemm import format_table as kernels_table

    rows = [{"n": 6144, "k": 4096, "m": 8192, "bf16_ms": 1.0, "cublas_ms": 0.5, "cublas_x": 2.0,
             "torchao_note": "torchao not importable (not installed)"}] * 2
    table = kernels_table(rows, ["cublas", "torchao_triton"])
    assert "2.00" in table and table.count("note (torchao): torchao not importable") == 1
    assert table.splitlines()[1].split()[-2:] == ["-", "-"]


def test_kernels_time_bf16_and_every_kernel_that_runs_in_turns(monkeypatch):
    """`bench kernels` (its GPU steps stood in for): a kernel whose first call fails leaves its note and is not
    timed; BF16 and the others are timed together, in turns, each ratio against that BF16; decode sizes graphed."""
    import precision_engine.bench.gemm as gemm
    import precision_engine.numerics.gemm as numerics_gemm
    from precision_engine.errors import UnsupportedError
    from precision_engine.numerics.formats import Kernel

    def fp8_gemm(xq, wq, *, kernel, batch_invariant):
        if kernel is Kernel.CUBLAS:
            raise UnsupportedError("cublas needs Hopper")

    turns = []

    def timed_turns(fns, sets, *, graphed, warmup, reps):
        turns.append((len(fns), graphed))
        return [2.0, *[1.0 + i for i in range(1, len(fns))]]

    monkeypatch.setattr(numerics_gemm, "fp8_gemm", fp8_gemm)
    monkeypatch.setattr(numerics_gemm, "deep_gemm_available", lambda: False)
    monkeypatch.setattr(torchao_ref, "unavailable", lambda *a, **kw: "torchao not importable (not installed)")
    monkeypatch.setattr(gemm, "rotation", lambda make, nbytes: [(torch.ones(2, 2), torch.ones(2, 2), None, None,
                                                                  None)] * 2)
    monkeypatch.setattr(gemm, "timed_turns", timed_turns)
    rows = gemm.bench_kernels(quick=True)
    assert [(r["m"], r["graphed"]) for r in rows] == [(8192, False), (1, True)] * 2
    assert turns == [(3, False), (3, True)] * 2  # bf16, cublas_pinned, triton
    row = rows[0]
    assert row["cublas_note"] == "UnsupportedError: cublas needs Hopper" and "cublas_ms" not in row
    assert (row["bf16_ms"], row["cublas_pinned_ms"], row["triton_ms"]) == (2.0, 2.0, 3.0)
    assert row["cublas_pinned_x"] == 1.0 and row["triton_x"] == 2.0 / 3.0
    assert row["torchao_note"].startswith("torchao not importable")


def test_calls_that_fail_are_left_out_of_the_turns_and_the_baseline_failing_fails(monkeypatch):
    """`timed_where_they_run` (host clock): a call failing at its first call, or while they take turns, is left out
    with its error and the rest are timed again without it; an error not of the `refused` types, or the
    baseline's, is raised."""
    import precision_engine.bench.gemm as gemm

    def fails(*args):
        raise ValueError("refused")

    def fails_later(*args):
        calls_seen.append(args)
        if len(calls_seen) > 1:  # its first call runs, its first call in turns fails
            raise ValueError("lost")

    calls_seen = []
    sets = [(1,), (2,)]
    turns = gemm.timed_where_they_run({"bf16": lambda s: None, "a": fails, "b": fails_later, "c": lambda s: None},
                                      sets, graphed=False, warmup=1, reps=2, refused=(ValueError,))
    assert list(turns.ms) == ["bf16", "c"] and set(turns.first_call_s) == {"bf16", "a", "b", "c"}
    assert {name: str(err) for name, err in turns.errors.items()} == {"a": "refused", "b": "lost"}
    with pytest.raises(ValueError, match="refused"):
        gemm.timed_where_they_run({"bf16": fails}, sets, graphed=False, warmup=0, reps=1, refused=(ValueError,))
    with pytest.raises(KeyError):
        gemm.timed_where_they_run({"bf16": lambda s: None, "a": lambda s: {}[s]}, sets, graphed=False, warmup=0,
                                  reps=1, refused=(ValueError,))


def test_torchao_adapter_says_why_it_cannot_run(monkeypatch):
    """Not installed; installed but no CUDA (answered before importing torchao); installed but not importable."""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert torchao_ref.unavailable("cuda") == "torchao not importable (not installed)"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setitem(sys.modules, "torchao.prototype.blockwise_fp8_training", None)  # any import would fail
    assert "needs CUDA" in torchao_ref.unavailable("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert torchao_ref.unavailable("cuda").startswith("torchao not importable (")


def test_cli_block_quick_runs_on_the_cpu(tmp_path):
    out = tmp_path / "sub" / "block.json"
    args = ["bench", "block", "--quick", "--device", "cpu", "--policy", "bf16_baseline", "--policy",
            "jetrl_unified", "--mode", "fast", "--reps", "1", "--rounds", "2", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "jetrl_unified" in result.output and "vs bf16" in result.output and "by round" in result.output
    document = json.loads(out.read_text())
    assert len(document["rows"]) == 4 and "torchao" in document["env"]


def test_cli_linear_prints_and_writes_each_row_as_it_is_measured(tmp_path, monkeypatch):
    """`bench linear` (at toy size on the CPU, the GPU check waved through): the JSON on disk parses and holds
    every row so far after each row, nothing half-written is left, and each row is printed with its first-call
    seconds before the final table."""
    import precision_engine.bench.linear as linear
    import precision_engine.cli.bench as cli_bench

    out, on_disk = tmp_path / "linear.json", []
    real = linear.bench_linear

    def toy(*, quick, variants, shapes, ms, rounds, on_row):
        assert ms is None and shapes is None and rounds == 2
        def check(row, rows):
            on_row(row, rows)
            on_disk.append(len(json.loads(out.read_text())["rows"]))

        return real(shapes=((256, 128),), ms=(128, 1), reps=1, warmup=0, variants=variants, rounds=rounds,
                    device="cpu", on_row=check)

    monkeypatch.setattr(linear, "bench_linear", toy)
    monkeypatch.setattr(cli_bench, "require_gpu", lambda out, verb: None)
    result = runner.invoke(app, ["bench", "linear", "--quick", "--variants", "fp8_bi", "--rounds", "2", "--out",
                                 str(out)])
    assert result.exit_code == 0, result.output
    assert "x by round: fp8_bi " in result.output and "fp8_bi_x_rounds" in out.read_text()
    assert on_disk == [1, 2, 3] and [p.name for p in tmp_path.iterdir()] == ["linear.json"]
    document = json.loads(out.read_text())
    assert len(document["rows"]) == 3 and "command" in document and "torchao" in document["env"]
    lines = result.output.splitlines()
    assert lines[0] == linear.format_header() and all("first call s: bf16 " in line for line in lines[1:4])
    assert "first calls s (all rows)" in result.output and result.output.rstrip().endswith(f"wrote {out}")


def test_cli_block_says_where_autos_gemms_ran_on_deep_gemm(monkeypatch):
    """With DeepGEMM on a Hopper GPU, the table ends saying AUTO's rows timed its launches (and the JSON's env
    names its version); elsewhere (this CPU run, no DeepGEMM) nothing is said."""
    import types

    from precision_engine.bench import gemm as bench_gemm
    from precision_engine.numerics import gemm

    args = ["bench", "block", "--quick", "--device", "cpu", "--policy", "bf16_baseline", "--mode", "fast",
            "--reps", "1"]
    assert "DeepGEMM" not in runner.invoke(app, args).output
    from precision_engine.numerics.capabilities import DeviceInfo

    fake = types.SimpleNamespace(fp8_gemm_nt=None, __version__="2.6.1")
    monkeypatch.setitem(sys.modules, "deep_gemm", fake)
    monkeypatch.setattr(gemm, "deep_gemm_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for capability in ((9, 0), (10, 0)):
        info = DeviceInfo("cuda", capability=capability, cublas_blockwise=True, deep_gemm=True)
        monkeypatch.setattr(gemm, "device_info", lambda device, info=info: info)
        note = bench_gemm.deep_gemm_note()
        if capability == (9, 0):
            assert bench_gemm.deep_gemm_version() == "2.6.1"
            assert note.startswith("DeepGEMM 2.6.1 is installed: kernel auto")
        else:
            assert note is None


def test_cli_linear_tokens_and_shapes_pick_the_rows(monkeypatch):
    import precision_engine.bench.linear as linear
    import precision_engine.cli.bench as cli_bench

    seen = []
    monkeypatch.setattr(linear, "bench_linear", lambda **kwargs: seen.append((kwargs["ms"], kwargs["shapes"])) or [])
    monkeypatch.setattr(cli_bench, "require_gpu", lambda out, verb: None)
    result = runner.invoke(app, ["bench", "linear", "--tokens", "1,16,8192"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["bench", "linear", "--shapes", "6144x4096,28672X4096"])
    assert result.exit_code == 0, result.output
    assert seen == [((1, 16, 8192), None), (None, ((6144, 4096), (28672, 4096)))]
    result = runner.invoke(app, ["bench", "linear", "--model", "qwen3-8b", "--tokens", "8192"])
    assert result.exit_code == 0, result.output
    assert seen[-1] == ((8192,), ((4096, 4096), (1024, 4096), (12288, 4096), (4096, 12288), (6144, 4096),
                                  (24576, 4096)))
    assert "qwen3-8b: 4096x4096, 1024x4096" in result.output


def test_model_shapes_are_the_layers_linears_and_the_stacks_the_decoder_fuses(tmp_path):
    """Llama-3.1-8B gives the 8B list's Llama rows (issue 12's shapes); an MoE model its attention only (the
    experts are grouped GEMMs); an HF directory whose weights are not whole 128-wide blocks is refused, naming
    them; a directory without a config.json is a ModelError."""
    from precision_engine.bench.gemm import SHAPES_8B
    from precision_engine.bench.linear import model_shapes
    from precision_engine.errors import ModelError, UsageError
    from precision_engine.models.loader import resolve_config

    llama, left_out = model_shapes("llama-3.1-8b")
    assert set(llama) == set(SHAPES_8B) - {(12288, 4096), (4096, 12288)} and not left_out
    assert model_shapes("qwen3-30b-a3b") == (((4096, 2048), (512, 2048), (2048, 4096), (5120, 2048)), [
        "the MoE experts of 48 layers (128 a layer: grouped GEMMs, which this benchmark does not time)"])
    config = resolve_config("tiny-llama") | {"hidden_size": 192, "intermediate_size": 320, "num_attention_heads": 3,
                                             "num_key_value_heads": 1, "head_dim": 64}
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match=r"no linear of its decoder layers is in whole 128-wide blocks \(left out: "
                                         r"192x192 \(not whole 128-wide blocks\)"):
        model_shapes(str(tmp_path / "odd"))
    with pytest.raises(ModelError, match="without a config.json"):
        model_shapes(str(tmp_path))


@pytest.mark.parametrize("args, message", [
    (["block", "--device", "cpu"], "runs only with --quick"),
    (["block", "--quick", "--device", "tpu"], "use cuda or cpu"),
    (["block", "--quick", "--device", "cpu", "--mode", "slow"], "use fast or batch-invariant"),
    (["linear", "--variants", "bf16,torchao_cublas"], "unknown variant 'torchao_cublas': choose from bf16,"),
    (["linear", "--tokens", "8192,x"], "--tokens '8192,x': expected comma-separated positive token counts"),
    (["linear", "--tokens", "0"], "expected comma-separated positive token counts"),
    (["linear", "--shapes", "4096x4096,14336"], "--shapes '4096x4096,14336': expected comma-separated weights N x K"),
    (["linear", "--shapes", "4096x100"], "multiples of 128"),
    (["linear", "--shapes", "axb"], "expected comma-separated weights N x K"),
    (["linear", "--model", "qwen3-8b", "--shapes", "4096x4096"], "--model and --shapes both choose the weights"),
    (["linear", "--model", "no-such-model"], "no-such-model"),
])
def test_cli_block_refuses_bad_flags_in_one_line(args, message):
    result = runner.invoke(app, ["bench", *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
@pytest.mark.parametrize("target", ["block", "linear"])
def test_cli_without_gpu_refuses_in_one_line(target):
    result = runner.invoke(app, ["bench", target, "--quick"])
    assert result.exit_code == 2 and "needs a CUDA GPU" in result.output and "Traceback" not in result.output


@pytest.mark.gpu
def test_torchao_blockwise_linear_is_the_linear_in_fp8():
    """Where torchao runs: its module shares the Linear's weight and its fwd/bwd track BF16 (>= 25 dB)."""
    reason = torchao_ref.unavailable()
    if reason is not None:
        pytest.skip(reason)
    lin = torch.nn.Linear(512, 256, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(384, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(384, 256, device="cuda", dtype=torch.bfloat16)
    ref = lin(x)
    ref.backward(dy)
    ref_dx, ref_dw = x.grad, lin.weight.grad
    for use_triton in (False, True):
        x.grad, lin.weight.grad = None, None
        module = torchao_ref.blockwise_linear(lin, use_triton=use_triton)
        assert module.weight is lin.weight
        y = module(x)
        y.backward(dy)
        for a, b in ((ref, y), (ref_dx, x.grad), (ref_dw, lin.weight.grad)):
            assert sqnr_db(a.float(), b.float()) >= 25
