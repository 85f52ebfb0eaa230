"""Answer extraction and the exact-match reward.

A completion's answer is, in order of precedence: the last `\\boxed{...}` (braces may nest, as in MATH), the
number after the last `####` (GSM8K), or the recipe's own short form, a number at the very start of the
completion ("19", " 19.", "19\\nQuestion: ..."). There is deliberately no "last number anywhere" fallback (verl's
flexible mode): a small policy can learn to spray digits to hit it.

The reward is 1.0 when the normalised answers are equal. When `math_verify` is importable it is also asked
about pairs that are not both plain numbers, so that equivalent forms (1/2 and 0.5, \\frac{1}{2}) count; any
failure inside it counts as a wrong answer. `reward_backend()` says which one is in use.
"""

from __future__ import annotations

import functools
import re
import threading
from types import ModuleType

_NUMBER = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
# A number at the start, not glued to a letter or digit ("19abc" is not an answer).
_LEADING_NUMBER = re.compile(rf"\s*\$?\s*({_NUMBER})(?![\w])")
_HASHES = "####"
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_PLAIN_NUMBER = re.compile(r"([+-]?)(\d+)(?:\.(\d+))?")


def normalize_answer(text: str) -> str:
    """Canonical form of an answer: '1,234' -> '1234', '+7.' -> '7', '-0' -> '0', '12.50' -> '12.5', '$5$' -> '5'.
    Text that is not a plain number comes back stripped, otherwise unchanged."""
    text = text.strip().strip("$").strip()
    text = text.replace("\\$", "").replace("\\!", "").rstrip(".").strip()
    if re.fullmatch(_NUMBER, text):
        text = text.replace(",", "")
    number = _PLAIN_NUMBER.fullmatch(text)
    if number is None:
        return text
    sign, whole, fraction = number.groups()
    whole = whole.lstrip("0") or "0"
    fraction = (fraction or "").rstrip("0")
    value = whole + (f".{fraction}" if fraction else "")
    return value if sign != "-" or value == "0" else f"-{value}"


def _last_boxed(text: str) -> str | None:
    """Content of the last balanced \\boxed{...}; an unclosed one is skipped in favour of an earlier one."""
    for match in reversed(list(_BOXED.finditer(text))):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start:i]
    return None


def extract_answer(text: str) -> str | None:
    """The normalised answer in a completion, or None when it holds none of the three forms."""
    boxed = _last_boxed(text)
    if boxed is not None and boxed.strip():
        return normalize_answer(boxed)
    if _HASHES in text:
        match = _LEADING_NUMBER.match(text[text.rindex(_HASHES) + len(_HASHES):])
        return normalize_answer(match.group(1)) if match else None
    match = _LEADING_NUMBER.match(text)
    return normalize_answer(match.group(1)) if match else None


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


def reward(completion_text: str, answer: str) -> float:
    """1.0 when the completion's answer equals `answer` (exactly after normalisation, or per math_verify), else 0.0."""
    predicted = extract_answer(completion_text)
    if predicted is None:
        return 0.0
    gold = normalize_answer(answer)
    if predicted == gold:
        return 1.0
    math_verify = _math_verify()
    if math_verify is None or (_PLAIN_NUMBER.fullmatch(gold) and _PLAIN_NUMBER.fullmatch(predicted)):
        return 0.0  # two canonical numbers that differ are different: no need for sympy's milliseconds
    # math_verify's timeouts are SIGALRM-based and raise off the main thread, so they are off there.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        same = math_verify.verify(math_verify.parse(f"${gold}$", parsing_timeout=timeout),
                                  math_verify.parse(f"${predicted}$", parsing_timeout=timeout),
                                  timeout_seconds=timeout)
    except Exception:  # a parser timeout or an unparsable expression is a wrong answer, not a crashed run
        return 0.0
    return 1.0 if same else 0.0
