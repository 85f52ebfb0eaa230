"""Answer extraction and the exact-match reward.

A completion's answer is, in order of precedence:
- the last complete box: `\\boxed{...}` or `\\fbox{...}` (braces may nest, as in MATH; an unclosed last box
  falls back to an earlier one), or `\\boxed 7` (the token after the space, as verl reads it);
- else the short answer after the last `####` that has one (GSM8K);
- else the recipe's own short form at the very start of the completion ("19", " 19.", "19\\nQuestion: ...").
A short answer is a whole number token, not the prefix of a longer one ("3/4", "1.5e3", "12abc" hold none), and
not the first operand of an equation: a first line "12 + 34 = 46" answers 46; "12 + 34" answers nothing. There
is deliberately no "last number anywhere" fallback (verl's flexible mode): a small policy can learn to spray
digits to hit it.

Answers are normalised (`normalize_answer`) in the spirit of verl's `strip_string`: \\dfrac is \\frac, \\left,
\\right, degrees, percent signs, a trailing \\text{unit}, a leading `x =` and spaces go. The reward is 1.0 when
the normalised answers are equal, or are numbers (decimals, a/b, \\frac{a}{b}) with the same exact value. When
`math_verify` is importable it is also asked about pairs that are not both numbers, so that equivalent forms
count; a failure or timeout inside it, or an answer too explosive to hand to sympy, is a wrong answer.
`reward_backend()` says which one is in use.
"""

from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.pool
import os
import re
import threading
from fractions import Fraction
from types import ModuleType

_NUMBER = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
# All or nothing: a number glued to a word, a slash or more digits ("3/4", "1.5e3", "1,2345") is none, nor is
# the first operand of an operation ("12 + 34").
_LEADING_NUMBER = re.compile(rf"\s*\$?\s*({_NUMBER})(?![\w/]|[.,]\d)(?![ \t]*[-+*/×÷^=])")
_EQUATION_LEFT = re.compile(r"[ \t$]*[-+]?[\d(][\d.,()+\-*/×÷^= \t$]*")
_EQUATION_RIGHT = re.compile(rf"[ \t]*\$?({_NUMBER})\$?\.?[ \t]*")
_HASHES = "####"
# A braced box's opening (group 1), a space-form box's token (group 2), or a brace.
_BOX_TOKENS = re.compile(r"\\(?:boxed|fbox)(?:\s*(\{)|\s+((?:[^\s${}]|\{[^\s${}]*\})+))|[{}]")
_PLAIN_NUMBER = re.compile(r"([+-]?)(\d+)(?:\.(\d+))?")
_RATIONAL = re.compile(r"[+-]?\d+(?:\.\d+|/\d+)?")
_LATEX_FRACTION = re.compile(r"([+-]?)\\frac(?:\{(\d+)\}|(\d))(?:\{(\d+)\}|(\d))")
_LATEX_NOISE = re.compile(r"\\[$!]|\\(?:left|right)(?![A-Za-z])|\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\?%")
_UNIT = re.compile(r"\\(?:text|mbox|mathrm)\s*\{[^{}]*\}\s*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z]\s*=(?=[^=]*$)")
_SPACES = re.compile(r"(?<![A-Za-z])\s+|\s+(?![A-Za-z])")  # "\\pi r" keeps its space, "- 5" loses it
# Towers of powers and huge powers or factorials, which sympy evaluates for minutes holding the GIL.
_EXPLOSIVE = re.compile(r"(?:\^|\*\*)\s*(?:\{[^{}]*(?:\^|\*\*)|[\w.]+\s*(?:\^|\*\*)|\{?\s*[+-]?\d{6,})|\d{5,}\s*!")
_MAX_SYMBOLIC_CHARS = 300
_TIMEOUT_S = 5
_POOL_START_TIMEOUT_S = 60
_POOL_SIZE = min(4, os.cpu_count() or 1)


def _drop_unit(text: str) -> str:
    """'5\\text{ cm}' -> '5'; a lone '\\text{Tuesday}' is the answer itself and stays."""
    unit = _UNIT.search(text)
    value = text[:unit.start()].strip() if unit else ""
    return value or text


def normalize_answer(text: str) -> str:
    """Canonical form of an answer, so that equal answers are equal strings: '1,234' -> '1234', '+7.' -> '7',
    '-0' -> '0', '12.50' -> '12.5', '$5$' -> '5'. LaTeX noise goes ('\\dfrac{1}{2}' -> '\\frac{1}{2}'; 'x = 3',
    '3^\\circ', '3\\%' and '3\\text{ cm}' -> '3'), and so do spaces except between letters ('- 5' -> '-5')."""
    text = text.strip().strip("$").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = _drop_unit(_LATEX_NOISE.sub("", text).strip().rstrip("."))
    text = _ASSIGNMENT.sub("", text).strip()
    if re.fullmatch(_NUMBER, text):
        text = text.replace(",", "")
    text = _SPACES.sub("", text).rstrip(".")
    number = _PLAIN_NUMBER.fullmatch(text)
    if number is None:
        return text
    sign, whole, fraction = number.groups()
    whole = whole.lstrip("0") or "0"
    fraction = (fraction or "").rstrip("0")
    value = whole + (f".{fraction}" if fraction else "")
    return value if sign != "-" or value == "0" else f"-{value}"


def _last_boxed(text: str) -> str | None:
    """Content of the last complete box, in one pass (rescanning from each box is quadratic in '\\boxed{' * n)."""
    spans = []  # (start, end) of each complete box's content
    open_braces: list[int | None] = []  # per open brace: where its box's content starts, None for a plain brace
    for token in _BOX_TOKENS.finditer(text):
        if token.group(2) is not None:
            spans.append(token.span(2))
        elif token.group() == "}":
            start = open_braces.pop() if open_braces else None
            if start is not None:
                spans.append((start, token.start()))
        else:
            open_braces.append(token.end() if token.group(1) else None)
    return text[slice(*max(spans))] if spans else None


def _equation_result(text: str) -> str | None:
    """N when the first line is arithmetic ending in '= N' ('12 + 34 = 46'): the result, not the first operand."""
    left, equals, right = text.lstrip().partition("\n")[0].rpartition("=")
    result = _EQUATION_RIGHT.fullmatch(right) if equals and _EQUATION_LEFT.fullmatch(left) else None
    return result.group(1) if result else None


def _short_answer(text: str) -> str | None:
    """The normalised number `text` starts with, or its leading equation's result; None when it has neither."""
    number = _equation_result(text)
    if number is None:
        match = _LEADING_NUMBER.match(text)
        number = match.group(1) if match else None
    return normalize_answer(number) if number is not None else None


def extract_answer(text: str) -> str | None:
    """The normalised answer in a completion, or None when it holds none of the three forms."""
    boxed = _last_boxed(text)
    answer = normalize_answer(boxed) if boxed is not None else ""
    if answer:
        return answer
    if _HASHES in text:
        # the last '####' with an answer: a trailing bare '####' does not void an earlier '#### 18'
        answers = (_short_answer(part) for part in reversed(text.split(_HASHES)[1:]))
        return next((answer for answer in answers if answer is not None), None)
    return _short_answer(text)


def _rational(text: str) -> Fraction | None:
    """The exact value of a normalised number, a/b or \\frac{a}{b}, so that 0.5, 1/2 and \\frac12 compare equal."""
    fraction = _LATEX_FRACTION.fullmatch(text)
    if fraction:
        sign, numerator, numerator_digit, denominator, denominator_digit = fraction.groups()
        text = f"{sign}{numerator or numerator_digit}/{denominator or denominator_digit}"
    if not _RATIONAL.fullmatch(text):
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):  # x/0, or more digits than int() converts
        return None


@functools.lru_cache(maxsize=1)
def _math_verify() -> ModuleType | None:
    """math_verify if installed (an optional extra), imported once on first use."""
    try:
        import math_verify
    except ImportError:
        return None
    return math_verify


def reward_backend() -> str:
    """'math_verify' when the reward also asks math_verify for equivalence, else 'exact'."""
    return "math_verify" if _math_verify() is not None else "exact"


def _math_verify_equal(gold: str, predicted: str) -> bool:
    """math_verify's verdict; its timeouts use SIGALRM, so they work only on a process's main thread."""
    math_verify = _math_verify()
    return math_verify.verify(math_verify.parse(f"${gold}$", parsing_timeout=_TIMEOUT_S),
                              math_verify.parse(f"${predicted}$", parsing_timeout=_TIMEOUT_S),
                              timeout_seconds=_TIMEOUT_S)


_pool: multiprocessing.pool.Pool | None = None
_pool_lock = threading.Lock()


def _worker_pool() -> multiprocessing.pool.Pool:
    """Worker processes for math_verify off the main thread, started on first use. A pool rather than a
    ProcessPoolExecutor: it can be terminated with a hung worker inside, here and at interpreter exit. One worker
    has imported math_verify before the first timed call, so a cold start does not read as a timeout."""
    global _pool
    with _pool_lock:
        if _pool is None:
            pool = multiprocessing.get_context("spawn").Pool(_POOL_SIZE, initializer=reward_backend)
            try:
                pool.apply_async(reward_backend).get(_POOL_START_TIMEOUT_S)
            except BaseException:
                pool.terminate()
                raise
            _pool = pool
        return _pool


def _discard_pool(pool: multiprocessing.pool.Pool) -> None:
    """Kill `pool` (a worker is hung in sympy, which no signal interrupts) so the next call starts a fresh one."""
    global _pool
    with _pool_lock:
        stale = _pool is pool
        if stale:
            _pool = None
    if stale:
        pool.terminate()


def _equal_in_worker(gold: str, predicted: str) -> bool:
    """math_verify's verdict from a worker process, within a wall-clock timeout: off the main thread (verl scores
    from a thread pool) math_verify has no timeout of its own and can hold the GIL for minutes. A timeout kills the
    pool, so answers waiting behind the hung one score 0 too: the explosive ones are screened out before."""
    pool = _worker_pool()
    try:
        return pool.apply_async(_math_verify_equal, (gold, predicted)).get(_TIMEOUT_S)
    except multiprocessing.TimeoutError:
        _discard_pool(pool)
        raise


def _symbolic_equal(gold: str, predicted: str) -> bool:
    """math_verify's verdict within a timeout; False for an explosive answer, a failure or a timeout."""
    if len(predicted) > _MAX_SYMBOLIC_CHARS or _EXPLOSIVE.search(predicted):
        return False
    try:
        if threading.current_thread() is threading.main_thread():
            return bool(_math_verify_equal(gold, predicted))
        return bool(_equal_in_worker(gold, predicted))
    except Exception:  # a timeout or an unparsable expression is a wrong answer, not a crashed run
        return False


def reward(completion_text: str, answer: str) -> float:
    """1.0 when the completion's answer equals `answer` (after normalisation, as exact numbers, or per
    math_verify), else 0.0."""
    predicted = extract_answer(completion_text)
    if predicted is None:
        return 0.0
    gold = normalize_answer(answer)
    if predicted == gold:
        return 1.0
    values = _rational(predicted), _rational(gold)
    if None not in values:
        return float(values[0] == values[1])  # two numbers are decided exactly: no need for sympy's milliseconds
    if _math_verify() is None:
        return 0.0
    return 1.0 if _symbolic_equal(gold, predicted) else 0.0
