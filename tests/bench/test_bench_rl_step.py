"""`python -m precision_engine.bench.rl_step` on the CPU at toy size: the wiring of one GRPO step per policy, not a
measurement (the H200's numbers are in BENCHMARKS.md)."""

import tempfile

from precision_engine.bench.rl_step import POLICIES, bench_rl_step, format_table


def test_the_step_runs_end_to_end_at_toy_size_on_the_cpu(tmp_path, monkeypatch):
    """Every policy takes a timed step after the warm-up one; rollout's logprobs are the trainer's bit for bit
    (as on the H200); the cut model's config.json is removed. ~5 s."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    rows = bench_rl_step("tiny-llama", layers=1, prompts=2, samples=2, prompt=8, gen=4, steps=1, micro_batch=2,
                         device="cpu")
    assert [r["policy"] for r in rows] == list(POLICIES)
    assert all(r["step_s"] > 0 and len(r["seconds"]) == 1 for r in rows)
    assert rows[0]["bf16_s_over_this"] == 1.0 and all(r["max_abs_dlogp"] == 0 for r in rows)
    assert [line.split()[0] for line in format_table(rows).splitlines()[1:]] == list(POLICIES)
    assert not list(tmp_path.rglob("config.json"))
