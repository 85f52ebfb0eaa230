"""`bench.rollout`: the GPU benchmark's loop at toy size on the CPU (every engine variant and both transformers
rows run, or say why not), its table, and the on-device random decoder it builds."""

import pytest
import torch

from precision_engine.bench.rollout import FORMATS, MODES, bench_rollout, format_table, random_decoder
from precision_engine.models.loader import resolve_config


def test_random_decoder_is_seeded_and_initialised_like_hf():
    config = resolve_config("tiny-llama")
    a, b = random_decoder(config, device="cpu", seed=3), random_decoder(config, device="cpu", seed=3)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert pa.dtype == torch.bfloat16 and torch.equal(pa, pb), name
        if name.endswith("norm.weight"):
            assert (pa == 1).all()
    std = a.model.layers[0].mlp.up_proj.weight.float().std().item()
    assert abs(std - config.get("initializer_range", 0.02)) < 0.002


def test_table_reports_ratios_and_errors():
    rows = [{"variant": "bf16", "mode": "fast", "tok_s": 100.0, "vs_bf16_fast": 1.0},
            {"variant": "x", "mode": "y", "error": "RuntimeError: no"}]
    table = format_table(rows)
    assert "1.00x" in table and "failed" in table and "RuntimeError: no" in table


@pytest.mark.slow
def test_every_variant_runs_at_toy_size():
    """6 engine rows and 2 transformers rows on tiny-llama (batch 2, 4 + 3 tokens). About 30 s on one core."""
    seen = []
    rows = bench_rollout("tiny-llama", batch=2, prompt=4, gen=3, runs=1, device="cpu", on_row=seen.append)
    assert [(r["variant"], r["mode"]) for r in rows[:6]] == [(f, m) for f, _ in FORMATS for m, _ in MODES]
    assert seen == rows and len(rows) == 8
    assert all("error" not in r and r["tok_s"] > 0 for r in rows), [r.get("error") for r in rows]
    assert rows[0]["vs_bf16_fast"] == 1.0 and all("vs_bf16_fast" in r for r in rows)


def test_json_records_the_command_as_typed_and_every_setting(tmp_path, monkeypatch):
    import json

    from precision_engine.bench import gemm, rollout

    def one_row(*args, on_row, **kwargs):
        rows = [{"variant": "bf16", "mode": "fast", "tok_s": 1.0}]
        on_row(rows[0])
        return rows

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the loop itself is tested above
    monkeypatch.setattr(rollout, "bench_rollout", one_row)
    monkeypatch.setattr(gemm, "environment", lambda: {"gpu": "none"})
    out = tmp_path / "r.json"
    rollout.main(["--model", "tiny-llama", "--runs", "5", "--no-transformers", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["command"] == ("python -m precision_engine.bench.rollout --model tiny-llama --runs 5 "
                                f"--no-transformers --out {out}")
    assert saved["settings"] == {"model": "tiny-llama", "batch": 64, "prompt": 128, "gen": 256, "runs": 5,
                                 "hf_runs": 1, "transformers_rows": False}
