"""Answer extraction on a table of completions, normalisation, and the reward with and without math_verify."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import types

import pytest

from precision_engine.rl.recipes.math import extract_answer, normalize_answer, reward, reward_backend
from precision_engine.rl.recipes.math import answers as reward_module

EXTRACTIONS = [
    # the recipe's short form: a number at the start of the completion
    ("19", "19"),
    (" 19", "19"),
    ("19.", "19"),
    ("19\nQuestion: 3+4=", "19"),
    ("+19", "19"),
    ("-0", "0"),
    ("-12", "-12"),
    ("007", "7"),
    ("12.0", "12"),
    ("12.50", "12.5"),
    ("1,234", "1234"),
    ("$5", "5"),
    ("19abc", None),
    # a number is all of its token or none of it
    ("3/4", None),
    ("1.5e3", None),
    ("12.5abc", None),
    ("1,2345", None),
    # an equation answers its result, never its first operand
    ("12 + 34 = 46", "46"),
    ("12 + 34 = 40 + 6 = 46.\nQuestion: 1+1=", "46"),
    ("12 + 34", None),
    ("3+4=7 apples", None),
    ("abc 19", None),  # no "last number anywhere" fallback
    ("", None),
    ("   ", None),
    # GSM8K
    ("She has 3+4=7 apples.\n#### 7", "7"),
    ("#### 1,000", "1000"),
    ("#### -3.", "-3"),
    ("#### 72 apples", "72"),
    ("#### 5\nthen\n#### 6", "6"),  # the last one
    ("#### none", None),
    ("####", None),
    ("#### 18\n####", "18"),  # the last '####' that has an answer
    ("#### 18\n#### none", "18"),
    # \boxed{}, nested braces, the last balanced one
    ("so the answer is \\boxed{42}.", "42"),
    ("\\boxed{1,234.0}", "1234"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{{3}}", "{3}"),
    ("\\boxed{1} then \\boxed{2}", "2"),
    ("\\boxed{7} and \\boxed{8", "7"),  # an unclosed last one falls back to the earlier one
    ("\\boxed {9}", "9"),
    ("\\boxed 7", "7"),  # the space form verl reads
    ("so \\boxed 7$.", "7"),
    ("\\boxed{1} then \\boxed 2", "2"),
    ("\\boxed \\frac{1}{2}", "\\frac{1}{2}"),
    ("\\boxed{\\boxed{5}}", "5"),
    ("}} \\boxed{5}", "5"),
    ("\\fbox{10}", "10"),
    ("\\boxed{3}\n#### 4", "3"),  # boxed wins over ####
    ("\\boxed{}\n#### 4", "4"),
    ("\\boxed{\\%}\n#### 4", "4"),  # a box that normalises to nothing is empty too
    ("\\boxed{x = 3}", "3"),
]


@pytest.mark.parametrize("text, expected", EXTRACTIONS)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("raw, canonical", [
    ("12", "12"), (" +12. ", "12"), ("-0.000", "0"), ("0012.3400", "12.34"), ("1,234,567", "1234567"),
    ("$\\$18$", "18"), ("x+1", "x+1"), ("12,34", "12,34"),
    ("\\dfrac{1}{2}", "\\frac{1}{2}"), ("\\tfrac12", "\\frac12"), ("\\left( 1, 2 \\right)", "(1,2)"),
    ("90^\\circ", "90"), ("90^{\\circ}", "90"), ("50\\%", "50"), ("5\\text{ cm}", "5"), ("7 \\mbox{m}.", "7"),
    ("\\text{Tuesday}", "\\text{Tuesday}"), ("x = 3", "3"), ("k=-2", "-2"), ("x = y + 1 = 3", "x=y+1=3"),
    ("- 5", "-5"), ("\\pi r^2", "\\pi r^2"),
])
def test_normalize_answer(raw, canonical):
    assert normalize_answer(raw) == canonical


@pytest.fixture
def no_math_verify(monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # makes `import math_verify` raise ImportError
    reward_module._math_verify.cache_clear()
    yield
    reward_module._math_verify.cache_clear()


@pytest.fixture
def fake_math_verify(monkeypatch):
    """A stand-in that calls \\sqrt{4} and 2 equal, and records what it was asked."""
    calls = []
    module = types.ModuleType("math_verify")
    module.parse = lambda text, **kwargs: text.strip("$")

    def verify(gold, target, **kwargs):
        calls.append((gold, target))
        if target == "boom":
            raise ValueError("parser blew up")
        return {gold, target} == {"2", "\\sqrt{4}"}

    module.verify = verify
    monkeypatch.setitem(sys.modules, "math_verify", module)
    reward_module._math_verify.cache_clear()
    yield calls
    reward_module._math_verify.cache_clear()


def test_finding_the_last_box_is_linear():
    """A guard against the quadratic scan (rescanning from every '\\boxed{' took 17 s for 4000 unclosed ones, and
    a policy stuck repeating it stalls the reward), not a speed claim: one pass takes milliseconds, 400x below."""
    for text in ("\\boxed{" * 4000, "\\boxed{" * 4000 + "}" * 4000):
        start = time.perf_counter()
        extract_answer(text)
        assert time.perf_counter() - start < 2.0


EXACT_PAIRS = [
    ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", 1.0),
    ("\\boxed{x = 3}", "3", 1.0),
    ("\\boxed{5\\text{ cm}}", "5", 1.0),
    ("\\boxed{90^\\circ}", "90", 1.0),
    ("\\boxed{50\\%}", "50", 1.0),
    ("\\boxed{- 5}", "-5", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{1/2}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\frac12}", "0.5", 1.0),
    ("\\boxed{-\\frac{3}{4}}", "-0.75", 1.0),
    ("\\boxed{4600\\%}", "46", 0.0),  # a percent sign goes; it does not divide by 100
    ("\\boxed{1/0}", "1", 0.0),
    ("3/4", "3", 0.0),
]


@pytest.mark.parametrize("completion, answer, expected", EXACT_PAIRS)
def test_exact_reward_normalises_like_verl(no_math_verify, completion, answer, expected):
    assert reward(completion, answer) == expected


def test_exact_reward_without_math_verify(no_math_verify):
    assert reward_backend() == "exact"
    assert reward("19", "19") == 1.0
    assert reward(" 1,019.", "1019") == 1.0
    assert reward("#### 19", " 19 ") == 1.0
    assert reward("18", "19") == 0.0
    assert reward("nothing", "19") == 0.0
    assert reward("\\boxed{1/2}", "0.5") == 1.0
    assert reward("\\boxed{\\sqrt{4}}", "2") == 0.0


def test_reward_asks_math_verify_only_beyond_numbers(fake_math_verify):
    assert reward_backend() == "math_verify"
    assert reward("\\boxed{\\sqrt{4}}", "2") == 1.0
    assert fake_math_verify == [("2", "\\sqrt{4}")]
    assert reward("18", "19") == 0.0 and reward("19", "19") == 1.0
    assert reward("\\boxed{1/2}", "0.5") == 1.0 and reward("\\boxed{\\frac{1}{3}}", "0.5") == 0.0
    assert len(fake_math_verify) == 1  # two numbers are decided exactly, never by sympy
    assert reward("\\boxed{boom}", "0.5") == 0.0  # a failure inside math_verify is a wrong answer
    assert reward("no answer", "0.5") == 0.0


@pytest.mark.parametrize("explosive", ["9^{9^{9}}", "9^9^9", "10^{1000000}", "99999!", "x+" * 200 + "1"])
def test_explosive_answers_never_reach_math_verify(fake_math_verify, explosive):
    """sympy evaluates these for minutes, holding the GIL."""
    assert reward(f"\\boxed{{{explosive}}}", "46") == 0.0
    assert fake_math_verify == []


def test_reward_with_the_real_math_verify():
    pytest.importorskip("math_verify")
    reward_module._math_verify.cache_clear()
    assert reward_backend() == "math_verify"
    assert reward("\\boxed{\\frac{1}{2}}", "0.5") == 1.0
    assert reward("\\boxed{\\frac{1}{3}}", "0.5") == 0.0
    assert reward("\\boxed{\\sqrt{4}}", "2") == 1.0


@pytest.mark.parametrize("completion, answer, expected", EXACT_PAIRS)
def test_both_backends_agree(completion, answer, expected):
    pytest.importorskip("math_verify")
    reward_module._math_verify.cache_clear()
    assert reward(completion, answer) == expected


_SCORE_IN_A_THREAD = textwrap.dedent("""
    import json, sys, threading
    from precision_engine.rl.recipes.math import reward
    scores = []
    thread = threading.Thread(target=lambda: scores.extend(reward(c, a) for c, a in json.loads(sys.argv[1])))
    thread.start()
    thread.join()
    print(json.dumps(scores))
""")


def _score_in_a_thread(pairs, path, timeout):
    """Scores from a non-main thread, as verl's reward workers ask, in a subprocess so that a hang fails the test
    instead of stalling it. The subprocess must also exit in time: a leaked worker holds its stdout open."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    process = subprocess.Popen([sys.executable, "-c", _SCORE_IN_A_THREAD, json.dumps(pairs)], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the subprocess and any worker it started
        process.communicate()
        pytest.fail(f"scoring from a thread did not finish within {timeout} s")
    assert process.returncode == 0, stderr
    return json.loads(stdout)


_HANGING_MATH_VERIFY = """
import os, pathlib, time
HUNG = pathlib.Path(__file__).with_name("hung.pid")
def parse(text, **kwargs):
    return text.strip("$")
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
def verify(gold, target, **kwargs):
    if target == "hang":
        HUNG.write_text(str(os.getpid()))
        time.sleep(120)  # as sympy stuck in a huge power: no signal reaches it
    return sorted(gold) == sorted(target) and not alive(int(HUNG.read_text()))
"""


@pytest.mark.slow
def test_math_verify_off_the_main_thread_is_killed_after_a_timeout(tmp_path):
    """A hung worker scores 0 within the timeout and is killed; the next answer is still scored (by a fake that
    calls anagrams equal once the hung worker is gone)."""
    (tmp_path / "math_verify.py").write_text(_HANGING_MATH_VERIFY)
    scores = _score_in_a_thread([["\\boxed{hang}", "7x"], ["\\boxed{ab}", "ba"]], [str(tmp_path), *sys.path], 60)
    assert scores == [0.0, 1.0]


@pytest.mark.slow
def test_the_real_math_verify_off_the_main_thread():
    pytest.importorskip("math_verify")
    pairs = [["\\boxed{9^{9^{9}}}", "46"], ["\\boxed{\\sqrt{4}}", "2"], ["\\boxed{\\sqrt{5}}", "2"]]
    assert _score_in_a_thread(pairs, sys.path, 30) == [0.0, 1.0, 0.0]
