"""The exit-status table (cli.app.EXIT_CODES) through typer's CliRunner, for every verb: 0 ok/same, 1 only a
verdict (invalid, different, promise broken), 2 a usage error or a failure; a crash or out-of-memory never 1;
141 when stdout's reader went away."""

import os
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from precision_engine.cli.app import EXIT_ERROR, EXIT_OK, EXIT_PIPE_CLOSED, EXIT_VERDICT, app

runner = CliRunner()
BAD_KERNEL = "rules.unified[1].linear.weight={dtype: float8_e4m3, granularity: block, block: [128, 256]}"
# jetrl_unified with its fused MoE experts moved into the FP8 rule, which no kernel can train yet
FP8_EXPERTS = ("--set", "rules.unified[0].match=[lm_head]",
               "--set", 'rules.unified[1].match=["re:.*_proj", "re:.*mlp\\\\.experts"]')

CASES = [
    # verb, args, status
    ("validate", ["validate", "jetrl_unified"], EXIT_OK),
    ("validate", ["validate", "jetrl_unified", "--model", "tiny-llama", "--set", BAD_KERNEL], EXIT_VERDICT),
    ("validate", ["validate", "jetrl_unified", "--model", "no-such-model"], EXIT_ERROR),
    ("validate", ["validate", "--no-such-flag"], EXIT_ERROR),
    ("schema", ["schema"], EXIT_OK),
    ("schema", ["schema", "extra"], EXIT_ERROR),
    ("plan", ["plan", "jetrl_unified", "-m", "tiny-llama"], EXIT_OK),
    ("plan", ["plan", "jetrl_unified", "-m", "tiny-qwen3-moe", *FP8_EXPERTS], EXIT_VERDICT),  # cannot train
    ("plan", ["plan", "jetrl_unified", "-m", "tiny-llama", "--set", "kernel=fastest"], EXIT_VERDICT),
    ("plan", ["plan", "jetrl_unified", "-m", "no-such-model"], EXIT_ERROR),
    ("diff", ["diff", "jetrl_unified", "jetrl_unified"], EXIT_OK),
    ("diff", ["diff", "jetrl_unified", "bf16_baseline"], EXIT_VERDICT),
    ("diff", ["diff", "jetrl_unified", "no_such_policy"], EXIT_ERROR),
    ("diff", ["diff", "jetrl_unified", "bf16_baseline", "-m", "no-such-model"], EXIT_ERROR),
    ("check", ["check", "-p", "bf16_baseline", "-m", "tiny-llama", "--seq-len", "8", "--no-decode"], EXIT_OK),
    ("check", ["check", "-p", "jetrl_unified", "-m", "no-such-model"], EXIT_ERROR),
    ("check", ["check", "-p", "jetrl_unified", "-m", "tiny-llama", "--set", "kernel=fastest"], EXIT_ERROR),
    ("check", ["check", "-p", "jetrl_unified", "-m", "tiny-qwen3-moe", *FP8_EXPERTS], EXIT_ERROR),  # refused
    ("check", ["check", "-p", "jetrl_unified", "-m", "tiny-llama", "--seq-len", "1"], EXIT_ERROR),
    ("export", ["export", "-p", "jetrl_unified", "-m", "no-such-model", "-o", "{tmp}/x"], EXIT_ERROR),
    ("export", ["export", "-p", "jetrl_unified", "-m", "tiny-llama", "-o", "{tmp}/x", "--set", BAD_KERNEL],
     EXIT_ERROR),
    ("bench", ["bench", "nothing"], EXIT_ERROR),
]


@pytest.mark.parametrize("verb, args, status", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_exit_status(verb, args, status, tmp_path):
    result = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == status, result.output
    assert "Traceback" not in result.output


def test_export_ok_and_bench_without_gpu(tmp_path):
    ok = runner.invoke(app, ["export", "-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(tmp_path / "x")])
    assert ok.exit_code == EXIT_OK, ok.output
    if not torch.cuda.is_available():
        assert runner.invoke(app, ["bench", "kernels", "--quick"]).exit_code == EXIT_ERROR


def test_check_exits_1_only_when_the_promise_breaks(monkeypatch):
    """A unified policy whose rollout prefill logits differ from training's: the one way check exits 1."""
    import precision_engine.verify.identity as identity

    real = identity._rollout_prefill
    monkeypatch.setattr(identity, "_rollout_prefill", lambda *a: real(*a) + 1)
    result = runner.invoke(app, ["check", "-p", "jetrl_unified", "-m", "tiny-llama", "--seq-len", "8",
                                 "--no-decode", "--no-layers"])
    assert result.exit_code == EXIT_VERDICT and "numerics promise is BROKEN" in result.output


CPU_OOM = RuntimeError("[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate memory: you tried "
                       "to allocate 1099511627776 bytes.")  # what torch's CPU allocator raises


@pytest.mark.parametrize("crash", [RuntimeError("a bug"), MemoryError("cannot allocate"),
                                   torch.OutOfMemoryError("CUDA out of memory"), CPU_OOM],
                         ids=["bug", "oom", "cuda-oom", "cpu-oom"])
@pytest.mark.parametrize("verb", ["validate", "plan", "diff", "check", "export"])
def test_a_crash_never_exits_1(verb, crash, monkeypatch, tmp_path):
    import precision_engine.policy as policy

    def boom(*args, **kwargs):
        raise crash

    for name in ("validate_files", "check_policy", "load_policy"):
        monkeypatch.setattr(policy, name, boom)
    monkeypatch.setattr("precision_engine.pipeline.load_policy", boom)
    args = {"validate": ["validate", "jetrl_unified"], "plan": ["plan", "jetrl_unified", "-m", "tiny-llama"],
            "diff": ["diff", "jetrl_unified", "bf16_baseline"],
            "check": ["check", "-p", "jetrl_unified", "-m", "tiny-llama"],
            "export": ["export", "-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(tmp_path / "x")]}[verb]
    result = runner.invoke(app, args)
    assert result.exit_code == EXIT_ERROR, result.output
    if isinstance(crash, MemoryError | torch.OutOfMemoryError) or crash is CPU_OOM:
        assert "error: out of memory" in result.output
    else:
        assert "internal error, RuntimeError: a bug" in result.output and "PRECISION_TRACEBACK=1" in result.output


@pytest.mark.parametrize("args", [
    ["validate", "jetrl_unified"],  # typer.echo
    ["plan", "jetrl_unified", "-m", "tiny-llama"],  # the plan's rich console
    ["plan", "jetrl_unified", "-m", "tiny-qwen3-moe", *FP8_EXPERTS],  # a verdict of 1, never reached
    ["diff", "jetrl_unified", "bf16_baseline", "--json"],
], ids=["validate", "plan", "plan-invalid", "diff-json"])
def test_a_closed_stdout_ends_the_verb_quietly_with_141_never_a_verdict(args):
    """`precision plan ... | head -1`: the reader goes away before the verb writes. Rich alone would exit 1 (a
    verdict) and typer.echo's BrokenPipeError would read "internal error"; ~3 s a case (a fresh interpreter)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-c", "from precision_engine.cli.app import main; main()", *args],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == EXIT_PIPE_CLOSED, done.stderr
    assert done.stderr == ""
