"""`precision check`'s sampled (engine -> trainer) row through typer's CliRunner: printed and in --json, part of
the exit status only where identity is promised, skipped with the reason for a model the engine cannot run.
Small settings (8 prefill tokens, 2 x 4 sampled): about 1-2 s per invocation on one free core."""

import json

from typer.testing import CliRunner

from precision_engine.cli.app import app

runner = CliRunner()
FAST = ["--seq-len", "8", "--no-decode", "--no-layers", "--samples", "2", "--gen", "4", "--score-batch", "1"]


def invoke(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_unified_sampled_row_holds_and_is_in_json():
    result = invoke("check", "-p", "jetrl_unified", "-m", "tiny-llama", *FAST, "--json")
    assert result.exit_code == 0, result.output
    sampled = json.loads(result.output)["sampled"]
    assert sampled["path"] == "sampled (engine -> trainer)" and sampled["tokens"] == 2 * 4
    assert sampled["identity_promised"] and sampled["bitwise"] and sampled["max_abs_dlogp"] == 0.0
    assert sampled["score_batch"] == 1 and sampled["samples"] == 2 and sampled["max_new_tokens"] == 4


def test_unified_kv_table_shows_the_sampled_row():
    result = invoke("check", "-p", "jetrl_unified_kv", "-m", "tiny-llama", *FAST)
    assert result.exit_code == 0, result.output
    assert "sampled (engine -> trainer)" in result.output
    assert "numerics promise holds: the engine's sampled logprobs vs the trainer's" in result.output


def test_no_promise_no_exit_1():
    result = invoke("check", "-p", "fp8_rollout_naive", "-m", "tiny-llama", *FAST, "--json")
    assert result.exit_code == 0, result.output
    sampled = json.loads(result.output)["sampled"]
    assert not sampled["identity_promised"] and not sampled["bitwise"] and sampled["max_abs_dlogp"] > 0


def test_a_broken_sampled_identity_exits_1(monkeypatch):
    import precision_engine.rl.onpolicy as onpolicy

    real = onpolicy.token_logprobs
    monkeypatch.setattr(onpolicy, "token_logprobs", lambda *a, **k: real(*a, **k) * 1.001)
    result = invoke("check", "-p", "jetrl_unified", "-m", "tiny-llama", *FAST)
    assert result.exit_code == 1, result.output
    assert "numerics promise holds: rollout prefill" in result.output  # prefill is fine: the sampled row broke
    assert "numerics promise is BROKEN: the engine's sampled logprobs" in result.output


def test_moe_skips_the_sampled_row_with_the_reason():
    result = invoke("check", "-p", "bf16_baseline", "-m", "tiny-qwen3-moe", *FAST, "--json")
    assert result.exit_code == 0, result.output
    sampled = json.loads(result.output)["sampled"]
    assert "mixture of experts" in sampled["skipped"]


def test_samples_0_skips_and_bad_sizes_are_usage_errors():
    result = invoke("check", "-p", "bf16_baseline", "-m", "tiny-llama", *FAST[:-6], "--samples", "0", "--json")
    assert result.exit_code == 0 and json.loads(result.output)["sampled"] is None
    result = runner.invoke(app, ["check", "-p", "bf16_baseline", "-m", "tiny-llama", "--score-batch", "0"])
    assert result.exit_code == 2 and "--score-batch" in result.output
