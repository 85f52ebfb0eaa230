"""Fuzz the CLI with mutated shipped policies: every answer is an exit status of 0, 1 or 2 and located lines
naming the file, never a traceback, within a time and a memory bound.

Hypothesis mutates the text of precision_engine/policies/*.yaml (values swapped for hostile ones from issue 8,
lines deleted, duplicated or inserted, YAML punctuation spliced in, files cut short) and runs `validate` and
`diff` on each, and `plan` on the ones that load. It runs in a child process whose address space may grow by
at most MEMORY_MIB past its imports and whose examples each have a deadline, so a regression fails here
instead of eating the machine. 15-35 s on 2 cores, by load (torch import, then 200 examples; 600 took 50 s);
PRECISION_FUZZ_EXAMPLES sets the count.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = int(os.environ.get("PRECISION_FUZZ_EXAMPLES", "200"))
MEMORY_MIB = 1024
DEADLINE_MS = 10_000  # per example: three CLI runs take well under a second; a hang takes forever
FILE = "fuzzed.yaml"

HOSTILE = [
    "9" * 400, "9" * 5000, "1e400", "-.inf", ".nan", "0x7fffffffffffffffff", "!!int abc", "!!float abc",
    "!!bool maybe", "!!int ''", "!!python/object/apply:os.system [echo hi]", "!binary aGk=", "*nowhere",
    "&a [*a]", "[" * 40 + "]" * 40, "'re:(.*.*)*X'", "['re:(.*.*)*X']", "['re:(?!lm_head).*']", "['re:(']",
    "/etc/passwd", "/proc/kmsg", "../../etc/passwd.yaml", "./missing.yaml", "p" * 300, f"./{'p' * 300}.yaml",
    "jetrl_unified", "bf16_baseline", "{w8: fp8_block_weight}", "fp8_block_weight", "null", "~", "[]", "{}",
    "''", "-1", "0", "true", "w" * 3000, "{a: &k {'x': 1}, b: [*k, *k, *k]}", "\"\\x00\"", "\t",
]
HOSTILE_LINES = [
    "extends: /etc/passwd", "extends: [bf16_baseline, bf16_baseline]", "extends: ./fuzzed.yaml",
    "extends: jetrl_unified", "<<: {kernel: triton}", "? [&l0 [x, x, x], &l1 [*l0, *l0, *l0], [*l1, *l1, *l1]]\n: 1",
    "name: my+ablation", "version: 2", "kernel: cublas", "numerics: {batch_invariant: true}", "formats: null",
    "rules: null", "phases: {train: nope, rollout: nope}", "---", "%YAML 1.1", "name: fuzzed\nname: twice",
]
PUNCTUATION = "[]{}:,&*!|>-?#'\"% \t\n\\"


@pytest.mark.slow
def test_fuzzed_policies_never_crash_the_cli(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("hypothesis")
    child = subprocess.run([sys.executable, __file__, str(EXAMPLES)], capture_output=True, text=True,
                           cwd=tmp_path, timeout=300)
    assert child.returncode == 0, (child.stdout + child.stderr)[-6000:]
    assert f"{EXAMPLES} examples ok" in child.stdout, child.stdout[-2000:]


def _fuzz(examples: int) -> None:  # runs in the child, in an empty working directory
    import resource

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from typer.testing import CliRunner

    from precision_engine.cli.app import app
    from precision_engine.policy.extends import SHIPPED_DIR

    shipped = {path.name: path.read_text() for path in sorted(SHIPPED_DIR.glob("*.yaml"))}
    runner = CliRunner()

    def run(*args: str, failing: tuple = (1, 2)):
        """`failing`: the exit statuses that mean trouble (for diff, 1 means "different")."""
        result = runner.invoke(app, list(args))
        crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
        assert not crashed and "Traceback" not in result.output, (args, result.output, repr(result.exception))
        assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
        if result.exit_code in failing:
            errors = [line for line in result.output.splitlines() if "error:" in line]
            assert errors, (args, result.output)
            for line in errors:  # located in the fuzzed file, or in a shipped base it extends
                assert line.startswith((FILE, "error: ")) or "precision_engine/policies/" in line, line
                assert FILE in result.output, result.output
        return result.exit_code

    run("plan", "bf16_baseline", "--model", "tiny-llama")  # imports and warms up before the memory limit
    used = int(Path("/proc/self/status").read_text().split("VmSize:")[1].split()[0]) << 10
    limit = used + (MEMORY_MIB << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    line_index = st.integers(min_value=0, max_value=200)
    mutation = st.one_of(
        st.tuples(st.just("value"), line_index, st.sampled_from(HOSTILE)),
        st.tuples(st.just("insert"), line_index, st.sampled_from(HOSTILE_LINES)),
        st.tuples(st.just("delete"), line_index, st.just("")),
        st.tuples(st.just("duplicate"), line_index, st.just("")),
        st.tuples(st.just("splice"), st.integers(min_value=0, max_value=5000), st.text(PUNCTUATION, max_size=4)),
        st.tuples(st.just("cut"), st.integers(min_value=0, max_value=5000), st.just("")),
    )

    def mutate(text: str, kind: str, where: int, what: str) -> str:
        lines = text.split("\n")
        i = where % len(lines)
        if kind == "value":
            key, sep, _ = lines[i].partition(": ")
            lines[i] = f"{key}: {what}" if sep else f"{lines[i]} {what}"
        elif kind == "insert":
            indent = len(lines[i]) - len(lines[i].lstrip())
            lines.insert(i, "\n".join(" " * indent + part for part in what.split("\n")))
        elif kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        else:
            at = where % (len(text) + 1)
            return text[:at] + what + text[at + len(what):] if kind == "splice" else text[:at]
        return "\n".join(lines)

    count = 0

    @settings(max_examples=examples, deadline=DEADLINE_MS, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(base=st.sampled_from(sorted(shipped)), mutations=st.lists(mutation, min_size=1, max_size=3))
    def check(base: str, mutations: list) -> None:
        nonlocal count
        text = shipped[base]
        for kind, where, what in mutations:
            text = mutate(text, kind, where, what)
        Path(FILE).write_text(text)
        valid = run("validate", FILE) == 0
        run("diff", FILE, "bf16_baseline", failing=(2,))
        if valid:
            run("plan", FILE, "--model", "tiny-llama", "--json")
        count += 1

    check()
    print(f"{count} examples ok")


if __name__ == "__main__":
    _fuzz(int(sys.argv[1]))
