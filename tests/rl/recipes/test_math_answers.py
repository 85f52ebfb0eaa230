"""Answer extraction on a table of completions, normalisation, and the reward with and without math_verify."""

import sys
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
    # \boxed{}, nested braces, the last balanced one
    ("so the answer is \\boxed{42}.", "42"),
    ("\\boxed{1,234.0}", "1234"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{{3}}", "{3}"),
    ("\\boxed{1} then \\boxed{2}", "2"),
    ("\\boxed{7} and \\boxed{8", "7"),  # an unclosed last one falls back to the earlier one
    ("\\boxed {9}", "9"),
    ("\\fbox{10}", "10"),
    ("\\boxed{3}\n#### 4", "3"),  # boxed wins over ####
    ("\\boxed{}\n#### 4", "4"),
]


@pytest.mark.parametrize("text, expected", EXTRACTIONS)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("raw, canonical", [
    ("12", "12"), (" +12. ", "12"), ("-0.000", "0"), ("0012.3400", "12.34"), ("1,234,567", "1234567"),
    ("$\\$18$", "18"), ("x+1", "x+1"), ("12,34", "12,34"),
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
    """A stand-in that calls 1/2 and 0.5 equal, and records what it was asked."""
    calls = []
    module = types.ModuleType("math_verify")
    module.parse = lambda text, **kwargs: text.strip("$")

    def verify(gold, target, **kwargs):
        calls.append((gold, target))
        if target == "boom":
            raise ValueError("parser blew up")
        return {gold, target} == {"0.5", "1/2"}

    module.verify = verify
    monkeypatch.setitem(sys.modules, "math_verify", module)
    reward_module._math_verify.cache_clear()
    yield calls
    reward_module._math_verify.cache_clear()


def test_exact_reward_without_math_verify(no_math_verify):
    assert reward_backend() == "exact"
    assert reward("19", "19") == 1.0
    assert reward(" 1,019.", "1019") == 1.0
    assert reward("#### 19", " 19 ") == 1.0
    assert reward("18", "19") == 0.0
    assert reward("nothing", "19") == 0.0
    assert reward("\\boxed{1/2}", "0.5") == 0.0


def test_reward_asks_math_verify_only_beyond_plain_numbers(fake_math_verify):
    assert reward_backend() == "math_verify"
    assert reward("\\boxed{1/2}", "0.5") == 1.0
    assert fake_math_verify == [("0.5", "1/2")]
    assert reward("18", "19") == 0.0 and reward("19", "19") == 1.0
    assert len(fake_math_verify) == 1  # two plain numbers never reach sympy
    assert reward("\\boxed{boom}", "0.5") == 0.0  # a failure inside math_verify is a wrong answer
    assert reward("no answer", "0.5") == 0.0


def test_reward_with_the_real_math_verify():
    pytest.importorskip("math_verify")
    reward_module._math_verify.cache_clear()
    assert reward_backend() == "math_verify"
    assert reward("\\boxed{\\frac{1}{2}}", "0.5") == 1.0
    assert reward("\\boxed{\\frac{1}{3}}", "0.5") == 0.0
