"""Crafted policies from issue 8 that crashed, exhausted memory or hung the loader: each is now refused in
located, bounded lines. Every test states the bound it holds (time, memory, message length)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from precision_engine.cli.app import app
from precision_engine.policy import check_policy, compile_pattern
from precision_engine.policy.diagnostics import MAX_FIELD
from precision_engine.policy.extends import SHIPPED_DIR
from precision_engine.policy.matching import pattern_error
from precision_engine.policy.yaml_source import MAX_BYTES, read_policy_text

VALID = """\
version: 1
rules:
  all:
    - match: ["*"]
      compute: bf16
phases: {train: all, rollout: all}
"""

# Checks one policy in a child process whose address space may grow by at most the test's budget beyond what
# its imports took, and prints the diagnostics as JSON: a blow-up fails there, never on the test machine.
_CHILD = """
import json, resource, sys
import jsonschema, re2
from precision_engine.policy import check_policy, compile_pattern
used = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) << 10
limit = used + (int(sys.argv[2]) << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
result = check_policy(sys.argv[1])
print(json.dumps({"valid": result.policy is not None, "diagnostics": [d.to_dict() for d in result.diagnostics]}))
"""


def errors_of(path, seconds: float = 5.0, megabytes: int = 128) -> list[dict]:
    """The errors `path` gets, checked within `seconds` and `megabytes` more address space than the imports
    take; every diagnostic is one line, located in `path` and of bounded length."""
    start = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(megabytes)], capture_output=True,
                           text=True, timeout=seconds + 5, cwd=path.parent)
    elapsed = time.perf_counter() - start
    assert child.returncode == 0, child.stderr[-2000:]
    assert elapsed < seconds, f"took {elapsed:.1f} s"
    result = json.loads(child.stdout)
    errors = [d for d in result["diagnostics"] if d["severity"] == "error"]
    assert not result["valid"] and errors
    for diagnostic in result["diagnostics"]:
        assert diagnostic["file"].endswith(path.name) and diagnostic["line"], diagnostic
        assert all("\n" not in str(v) and len(str(v)) <= MAX_FIELD for v in diagnostic.values()), diagnostic
    return errors


# --- Memory: expanded bytes are bounded, not only nodes; no unbounded text in a message ---------------------

def _nested_aliases(levels: int) -> str:
    """[&l0 [x x10], &l1 [*l0 x10], ...]: 10**levels scalars once expanded, a few hundred bytes written."""
    items = ["&l0 [" + ", ".join(["x"] * 10) + "]"]
    items += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def test_alias_bomb_as_a_mapping_key_is_refused_unexpanded(tmp_policy):
    """Was 2 GB and 47 s: the key node was never counted and its repr went into the message."""
    path = tmp_policy("key_bomb.yaml", f"version: 1\n? {_nested_aliases(9)}\n: 1\n")
    assert len(path.read_bytes()) < 600
    (error,) = errors_of(path, seconds=2, megabytes=16)
    assert (error["line"], error["message"]) == (2, "mapping keys must be strings, got a list")


def test_long_string_aliased_many_times_stops_at_the_character_cap(tmp_policy):
    """Was out of memory: 10,000 aliases of a 900 KB string are 20 nodes' worth under the node cap."""
    text = f"description: &s {'a' * 900_000}\nx: [{', '.join(['*s'] * 10_000)}]\n"
    (error,) = errors_of(tmp_policy("long_string.yaml", VALID + text), seconds=20, megabytes=64)
    assert error["message"].startswith("more than 1048576 characters after expanding aliases")


def test_alias_bomb_of_keys_counts_the_keys(tmp_policy):
    """Keys are text too: a mapping of long keys aliased many times hits the character cap."""
    text = f"formats:\n  f: &m\n    ? {'k' * 50_000}\n    : 1\nx: [{', '.join(['*m'] * 40)}]\n"
    (error,) = errors_of(tmp_policy("key_chars.yaml", VALID + text), megabytes=32)
    assert "characters after expanding aliases" in error["message"]


def test_invalid_regex_aliased_is_compiled_once_and_shown_clipped(tmp_policy):
    """Was 156 s: a long invalid regex aliased 40 times was compiled (and printed) once per alias."""
    regex = "re:" + "a{1,2}" * 4_000 + "("
    text = VALID.replace('match: ["*"]', f'match: [&r "{regex}", {", ".join(["*r"] * 39)}]')
    errors = errors_of(tmp_policy("regex_aliases.yaml", text), seconds=2)
    assert len(errors) == 40 and all("invalid regex" in e["message"] and len(e["message"]) < 300 for e in errors)


def test_long_unknown_format_name_never_reaches_difflib_or_a_message_whole(tmp_policy):
    """Was 680 MB: a 200 KB unknown format name referenced 4,000 times, each compared by difflib."""
    name = "w" * 200_000
    few = VALID.replace("compute: bf16", f"linear: {{weight: &n {name}, input: *n}}")
    errors = errors_of(tmp_policy("long_format_name.yaml", few), seconds=5)
    assert errors and all(len(e["message"]) <= MAX_FIELD and not e["hint"].startswith("did you mean") for e in errors)
    many = few.replace("input: *n}", "input: *n}\n      x: [" + ", ".join(["*n"] * 4_000) + "]")
    (error,) = errors_of(tmp_policy("many_format_names.yaml", many), seconds=5)
    assert "characters after expanding aliases" in error["message"]


def test_long_values_are_clipped_in_every_message(tmp_policy):
    """Schema messages quote the value they reject: a 500 KB value is quoted in a few dozen characters."""
    text = VALID + f"kernel: {'k' * 500_000}\nnumerics: {{nonfinite: [{'n' * 100_000}]}}\n? {'u' * 100_000}\n: 1\n"
    errors = errors_of(tmp_policy("long_values.yaml", text))
    assert len(errors) == 3 and all(len(e["message"]) < 600 for e in errors)


# --- Tracebacks: numbers and names that crashed the loader are located one-line errors -----------------------

runner = CliRunner()

_THRESHOLD = "correction: {importance_sampling: {threshold: %s}}\n"
NUMBERS = {
    "int_400_digits": VALID + _THRESHOLD % ("9" * 400),  # was OverflowError in math.isfinite
    "int_5000_digits": VALID + _THRESHOLD % ("9" * 5000),  # was ValueError: Python's int-string limit
    "int_beyond_64_bits": VALID + _THRESHOLD % str(2**64),
    "tagged_int": VALID.replace("version: 1", "version: !!int abc"),  # was ValueError
    "tagged_float": VALID.replace("version: 1", "version: !!float abc"),  # was ValueError
    "tagged_bool": VALID.replace("version: 1", "version: !!bool maybe"),  # was KeyError
    "tagged_empty_int": VALID.replace("version: 1", "version: !!int ''"),  # was IndexError
    "long_extends_name": VALID + f"extends: {'a' * 300}\n",  # was OSError: file name too long
}


def _one_located_line_per_error(output: str, file: str) -> None:
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if "error:" in line]
    assert lines and all(line.startswith(f"{file}:") for line in lines), output


@pytest.mark.parametrize("name", NUMBERS)
def test_bad_numbers_and_names_are_located_errors(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / f"{name}.yaml").write_text(NUMBERS[name])
    (error,) = errors_of(tmp_path / f"{name}.yaml", seconds=5)
    assert error["line"] == NUMBERS[name].count("\n") or error["key_path"] == "version", error
    validate = runner.invoke(app, ["validate", f"{name}.yaml"])
    assert validate.exit_code == 1
    _one_located_line_per_error(validate.output, f"{name}.yaml")
    diff = runner.invoke(app, ["diff", f"{name}.yaml", "bf16_baseline"])
    assert diff.exit_code == 2  # trouble, not "different"
    _one_located_line_per_error(diff.output, f"{name}.yaml")


@pytest.mark.parametrize("verb", [["validate"], ["diff", "bf16_baseline"]])
def test_policy_argument_too_long_for_the_file_system_is_a_usage_error(verb):
    result = runner.invoke(app, [verb[0], "p" * 300 + ".yaml", *verb[1:]])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: cannot open policy ppp") and "File name too long" in result.output
    assert len(result.output.splitlines()) == 1


@pytest.mark.parametrize("verb", ["validate", "plan"])
def test_model_argument_too_long_for_the_file_system_is_a_usage_error(verb):
    pytest.importorskip("torch")
    result = runner.invoke(app, [verb, "bf16_baseline", "--model", "m" * 300])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: cannot open model 'mmm") and "File name too long" in result.output
    assert len(result.output.splitlines()) == 1


# --- extends: shipped names and files beside the policy only; capped reads; nothing else quoted -------------

@pytest.mark.parametrize("ref,problem", [
    ("/etc/passwd", "is an absolute path"),
    ("/proc/kmsg", "is an absolute path"),  # procfs says st_size 0, and reading it blocked
    ("~/base.yaml", "is an absolute path"),
    ("../outside.yaml", "leaves the policy's directory (..)"),
    ("sub/../../outside.yaml", "leaves the policy's directory (..)"),
    ("./link_out.yaml", "is a link that leads out of the policy's directory"),
    ("./link_zero.yaml", "is a link that leads out of the policy's directory"),
    ("./fifo.yaml", "is not a regular file"),
    ("./notes.txt", "is not a .yaml or .yml file"),
    (f"./{'a' * 300}.yaml", "cannot be read (File name too long)"),
])
def test_extends_outside_the_policy_directory_is_refused_unread(ref, problem, tmp_path):
    (tmp_path / "outside.yaml").write_text("version: 1\nsecret: do-not-print\n")
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    (policy_dir / "notes.txt").write_text("secret: do-not-print\n")
    (policy_dir / "link_out.yaml").symlink_to(tmp_path / "outside.yaml")
    (policy_dir / "link_zero.yaml").symlink_to("/dev/zero")
    os.mkfifo(policy_dir / "fifo.yaml")  # opening it for reading would wait for a writer forever
    path = policy_dir / "child.yaml"
    path.write_text(VALID + f"extends: {json.dumps(ref)}\n")
    (error,) = errors_of(path, seconds=5)
    assert error["line"] == 7 and error["message"].startswith("extends target ") and problem in error["message"]
    assert "do-not-print" not in json.dumps(error) and "root:" not in json.dumps(error)


def test_extends_beside_and_below_the_policy_still_works(tmp_path):
    (tmp_path / "bases").mkdir()
    (tmp_path / "bases" / "common.yaml").write_text(VALID.replace("version: 1\n", "version: 1\nkernel: triton\n"))
    (tmp_path / "mid.yaml").write_text("extends: bases/common.yaml\n")
    (tmp_path / "top.yaml").write_text("name: top\nextends: [./mid.yaml, bf16_baseline]\nkernel: cublas\n")
    result = check_policy(tmp_path / "top.yaml")
    assert result.policy is not None and result.policy.kernel.value == "cublas", result.diagnostics


@pytest.mark.skipif(not Path("/proc/self/pagemap").exists(), reason="needs Linux procfs")
def test_reads_stop_at_the_byte_cap_whatever_st_size_says():
    """/proc/self/pagemap reports st_size 0 and reads on for gigabytes: reading stops after MAX_BYTES + 1."""
    assert Path("/proc/self/pagemap").stat().st_size == 0
    start = time.perf_counter()
    text, (problem,) = read_policy_text(Path("/proc/self/pagemap"), "pagemap")
    assert text is None and f"larger than {MAX_BYTES} bytes" in problem.message
    assert time.perf_counter() - start < 2


def test_fifo_or_device_as_the_policy_argument_is_a_usage_error(tmp_path):
    os.mkfifo(tmp_path / "fifo.yaml")
    for source in (tmp_path / "fifo.yaml", "/dev/zero"):
        result = runner.invoke(app, ["validate", str(source)])
        assert result.exit_code == 2 and "is not a regular file" in result.output, result.output


# --- Hangs: matching is linear in the module name ---------------------------------------------------------

CATASTROPHIC = ["re:(.*.*)*X", "re:(a|a)*X", "re:(a+)+X", "re:" + ".*" * 12 + "X", "*a*a*a*a*a*a*a*a*a*a*a*X"]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_backtracking_patterns_match_long_names_in_linear_time(pattern):
    """Python's re takes exponential (or n**12) time on these against a name without the final X."""
    match = compile_pattern(pattern)
    start = time.perf_counter()
    for length in (30, 300, 3_000, 30_000):
        assert not match("a" * length) and not match("model.layers.0." + "a" * length)
    assert time.perf_counter() - start < 0.5
    assert match("a" * 29 + "X")


@pytest.mark.parametrize("pattern", ["re:(?!lm_head).*", "re:(?<=x)y", r"re:(a)\1", r"re:.*\Z"])
def test_patterns_that_need_backtracking_are_refused_with_a_hint(pattern):
    problem = pattern_error(pattern)
    assert problem.startswith("invalid regex") and "order the rules instead" in problem


NAMES = [f"model.layers.{i}.{part}" for i in (0, 7, 31) for part in (
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate", "mlp.gate_proj",
    "mlp.up_proj", "mlp.down_proj", "mlp.experts.3.up_proj", "input_layernorm", "post_attention_layernorm")]
NAMES += ["lm_head", "model.embed_tokens", "model.norm", "model.layers.0.self_attn", "", "Q_PROJ", "x.y\nz"]


def test_re2_matches_exactly_what_python_re_matches_for_ordinary_patterns():
    """Every `re:` pattern in the shipped policies, the README and these tests, plus common idioms."""
    shipped = [p for path in SHIPPED_DIR.glob("*.yaml") for p in re.findall(r'"(re:[^"]*)"', path.read_text())]
    idioms = [r"re:.*\.(q|k|v)_proj", r"re:model\.layers\.(0|31)\..*", r"re:.*layers\.[0-9]+\.mlp\..*_proj",
              r"re:.*\d+\.self_attn\..*", r"re:(?i).*Q_PROJ", r"re:.*mlp\.experts\.\d+\..*", "re:lm_head|.*norm",
              r"re:.*\w+_proj", "re:.*(gate|up)_proj", "re:.{5,}head", r"re:[^.]+", "re:.+", "re:.*", "re:"]
    for pattern in shipped + idioms:
        python = re.compile(pattern[3:])
        for name in NAMES:
            assert compile_pattern(pattern)(name) is (python.fullmatch(name) is not None), (pattern, name)
    assert len(shipped) >= 5


@pytest.mark.slow
def test_plan_with_a_catastrophic_regex_finishes():
    """`plan` hung for more than 60 s on `re:(.*.*)*X`; now it answers in the time torch takes to import
    (5-12 s on 2 busy cores), run in a child process so that a regression fails instead of hanging CI."""
    pytest.importorskip("torch")
    first_rule = '    - match: ["re:(.*.*)*X"]\n      compute: fp32\n    - match: ["*"]'
    policy = VALID.replace('    - match: ["*"]', first_rule)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "catastrophic.yaml"
        path.write_text(policy)
        child = subprocess.run([sys.executable, "-c", "from precision_engine.cli.app import main; main()", "plan",
                                str(path), "--model", "tiny-llama", "--json"], capture_output=True, text=True,
                               timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "Traceback" not in child.stderr and json.loads(child.stdout)


# --- Located in the right file ------------------------------------------------------------------------------

def test_a_bad_name_taken_from_the_file_is_blamed_on_that_file(tmp_path, monkeypatch):
    """`extends: jetrl_unified` in my+ablation.yaml was blamed on the shipped policy's `name:` line."""
    monkeypatch.chdir(tmp_path)
    Path("my+ablation.yaml").write_text("extends: jetrl_unified\nkernel: triton\n")
    (error,) = check_policy("my+ablation.yaml").errors
    assert (error.file, error.line, error.key_path) == ("my+ablation.yaml", None, "name")
    assert "'my+ablation' is not a valid name" in error.message and "add `name: my_ablation`" in error.hint
    result = runner.invoke(app, ["validate", "my+ablation.yaml"])
    assert result.exit_code == 1 and result.output.startswith("my+ablation.yaml: error: name: ")


def test_an_inherited_name_is_never_located_in_the_base(tmp_path):
    (tmp_path / "child.yaml").write_text("extends: jetrl_unified\n")
    result = check_policy(tmp_path / "child.yaml")
    assert result.policy.name == "child" and result.policy.resolved["name"] == "child"
    assert not any("jetrl_unified.yaml" in str(d) for d in result.diagnostics)


def test_an_error_in_a_list_the_policy_replaced_is_located_in_the_policy(tmp_path, monkeypatch):
    """A merge replaces a list whole, yet the base's locations under it stayed: the child's rule without a weight
    was blamed on jetrl_unified.yaml's line 29 ("in a base of child.yaml")."""
    monkeypatch.chdir(tmp_path)
    Path("child.yaml").write_text("extends: jetrl_unified\nname: child\nrules:\n  unified:\n"
                                  '    - match: ["re:.*embed_tokens", lm_head, "re:.*norm"]\n      compute: bf16\n'
                                  '    - match: ["re:.*_proj"]\n      linear: {input: a8}\n')
    (error,) = check_policy("child.yaml").errors
    assert (error.file, error.line) == ("child.yaml", 8) and "missing required key 'weight'" in error.message


@pytest.mark.parametrize("content", [b"\xff\xfe binary", b"a: " + b"x" * MAX_BYTES], ids=["not-utf8", "too-large"])
def test_an_unreadable_policy_is_named_as_the_user_knows_it_and_not_as_a_base_of_itself(content, tmp_path,
                                                                                        monkeypatch):
    """Given by its absolute path from the directory it sits in: one line on `bad.yaml`, as every other
    diagnostic of the file names it (the read's diagnostics named "/abs/bad.yaml", "(in a base of bad.yaml)")."""
    (tmp_path / "bad.yaml").write_bytes(content)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["validate", str(tmp_path / "bad.yaml")])
    first = result.output.splitlines()[0]
    assert result.exit_code == 1 and re.match(r"bad\.yaml(:\d+:\d+)?: error: ", first) and "base" not in first, \
        result.output


@pytest.mark.parametrize("value", ['""', "[]", "{}"])
def test_an_empty_lower_threshold_is_a_located_error_not_a_crash(value, tmp_path):
    """`lower or 0.5` read an empty string, list or mapping as the default number, and the finiteness check
    then raised TypeError (an internal error) in validate and plan."""
    path = tmp_path / "mis.yaml"
    path.write_text(f"extends: fp8rl_rollout_mis\nname: mis\ncorrection:\n  importance_sampling:\n"
                    f"    lower_threshold: {value}\n")
    result = check_policy(path)
    (error,) = [d for d in result.diagnostics if d.severity == "error"]
    assert (error.line, error.key_path) == (5, "correction.importance_sampling.lower_threshold"), error
