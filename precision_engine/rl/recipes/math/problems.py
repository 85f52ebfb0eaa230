"""The generated problems: arithmetic and one-step word problems with exact integer answers.

Every split is drawn from its own `random.Random` stream seeded by a string (hashed with SHA-512 by Python, so
the same on every machine and run; the global RNG is never touched). Held-out is drawn first, then validation,
then train, each rejecting prompts already in an earlier split, so the three are disjoint and held-out does not
depend on how large train is. Train is a stream: a shorter train is a prefix of a longer one.

Difficulty: additions are the bulk of the default mix, with operands of 1..max_digits digits (2 by default:
see DEFAULT_MAX_DIGITS for what was measured with 3), the length drawn uniformly before the number, so short
sums are as common as long ones; 2x1-digit multiplication stayed flat under RL in a probe.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Mapping

from precision_engine.errors import UsageError
from precision_engine.policy.diagnostics import did_you_mean

# Bump when a template or a distribution changes: it is part of `MathRecipe.config`, which callers hash.
GENERATOR_VERSION = 3

KINDS = ("add", "sub", "mul", "word")
# The default is what a 2-layer model learns within the CPU budget. Measured on it (batch 256, lr 3e-3): additions
# alone reach 30% greedy validation accuracy in ~250 warm-up steps; 80% additions + 10% subtractions + 10% word
# problems were still under 10% after 550. A probe saw 2x1-digit products stay flat under RL. Pass a mix
# (`precision run --mix add=0.8,sub=0.1,word=0.1`) for the other kinds.
DEFAULT_MIX = {"add": 1.0}
# Operands of additions and subtractions have 1..DEFAULT_MAX_DIGITS digits. Measured on the recipe's 2-layer
# model (batch 256, lr 3e-3): with 2 digits greedy validation accuracy reaches 30% after ~250 warm-up steps;
# with 3 digits it was still under 3% after 600 (the first digit of a 3-digit sum needs two carries).
DEFAULT_MAX_DIGITS = 2

# Rejection sampling gives up after this many draws per wanted problem, instead of looping forever when a mix
# asks for more distinct problems of a kind than exist (1-2 digit x 1 digit multiplication has 1,000).
_MAX_DRAWS_PER_PROBLEM = 50
# Rejected draws in a row after which a split's kinds count as used up (a fresh problem then has a chance below
# about 1e-5 a draw): a size beyond what the kinds hold fails in seconds, not after 50 draws a wanted problem.
_MAX_REJECTS_IN_A_ROW = 100_000


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem. `prompt` is the text the model continues (no chat template); `answer` the normalised exact
    answer the reward compares against; `target` a supervised completion for the warm-up; `kind` where it came
    from (a generator kind, or "gsm8k"/"verl" for loaded data)."""

    prompt: str
    answer: str
    target: str
    kind: str = "user"


def format_prompt(problem: Problem, template: str = "{prompt}") -> str:
    """The text fed to the tokenizer: `template` with `{prompt}` replaced. The built-in model reads the prompt as
    is; an HF model without its chat template uses `HFTokenizer.prompt_template` (a Question/Answer frame). A
    template with text after `{prompt}` frames the answer itself, so a word problem's own WORD_ANSWER_CUE is dropped
    there: "Question: ... Answer:\nAnswer:" would ask twice."""
    prompt = problem.prompt
    if template.partition("{prompt}")[2].strip():
        prompt = prompt.removesuffix(WORD_ANSWER_CUE)
    return template.replace("{prompt}", prompt)


def _number(rng: random.Random, max_digits: int) -> int:
    """A number of 1..max_digits digits, the length drawn first (0-9 count as one digit)."""
    digits = rng.randint(1, max_digits)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def _arithmetic(prompt: str, value: int, kind: str) -> Problem:
    return Problem(prompt=prompt, answer=str(value), target=str(value), kind=kind)


def _add(rng: random.Random, max_digits: int) -> Problem:
    a, b = _number(rng, max_digits), _number(rng, max_digits)
    return _arithmetic(f"{a}+{b}=", a + b, "add")


def _sub(rng: random.Random, max_digits: int) -> Problem:
    a, b = _number(rng, max_digits), _number(rng, max_digits)
    a, b = max(a, b), min(a, b)  # non-negative results keep the answer alphabet to digits
    return _arithmetic(f"{a}-{b}=", a - b, "sub")


def _mul(rng: random.Random, max_digits: int) -> Problem:
    a, b = _number(rng, min(max_digits, 2)), rng.randint(0, 9)
    return _arithmetic(f"{a}*{b}=", a * b, "mul")


_NAMES = ("Tom", "Ann", "Sam", "Mia", "Ben", "Lily", "Max", "Zoe", "Leo", "Eva")
_ITEMS = ("apples", "pears", "books", "coins", "cards", "marbles", "stickers", "pencils", "shells", "stamps")
# (template, sign): the question needs a + b or a - b.
# Terse on purpose: every rollout batch pads to its longest prompt, so a long word problem would multiply the
# CPU cost of a whole GRPO step (a ~90-character template made rows 4x longer than the sums they sit with).
_WORD_TEMPLATES = (
    ("{name} has {a} {items}, buys {b}. {Items}?", +1),
    ("{name} had {a} {items}, found {b}. {Items}?", +1),
    ("A box has {a} {items}; {name} adds {b}. {Items}?", +1),
    ("{name} has {a} {items}, gives {b} away. {Items}?", -1),
    ("{name} had {a} {items}, lost {b}. {Items}?", -1),
    ("A box has {a} {items}; {name} takes {b}. {Items}?", -1),
)
WORD_ANSWER_CUE = " Answer: "


def _word(rng: random.Random, max_digits: int) -> Problem:  # operands below 100 whatever max_digits says
    template, sign = rng.choice(_WORD_TEMPLATES)
    a, b = rng.randint(2, 99), rng.randint(1, 99)
    if sign < 0:
        a, b = max(a, b), min(a, b)
    items = rng.choice(_ITEMS)
    question = template.format(name=rng.choice(_NAMES), items=items, Items=items.capitalize(), a=a, b=b)
    value = a + sign * b
    return Problem(prompt=question + WORD_ANSWER_CUE, answer=str(value), target=str(value), kind="word")


_GENERATORS: dict[str, Callable[[random.Random, int], Problem]] = {"add": _add, "sub": _sub, "mul": _mul, "word": _word}


def resolve_mix(mix: Mapping[str, float] | None) -> dict[str, float]:
    """Validate a kind -> weight mapping and normalise it to sum 1 (kinds in KINDS order, zeros dropped)."""
    mix = DEFAULT_MIX if mix is None else mix
    for kind, weight in mix.items():
        if kind not in _GENERATORS:
            hint = did_you_mean(kind, KINDS)
            raise UsageError(f"math recipe mix: unknown kind {kind!r}; expected one of {', '.join(KINDS)}"
                             + (f" ({hint})" if hint else ""))
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not 0 <= weight < math.inf:
            raise UsageError(f"math recipe mix: weight of {kind!r} must be a finite number >= 0, got {weight!r}")
    total = float(sum(mix.values()))
    if total == math.inf:  # finite weights whose sum overflows: the same proportions, scaled down
        return resolve_mix({kind: weight / len(mix) for kind, weight in mix.items()})
    if total <= 0:
        raise UsageError("math recipe mix: at least one kind needs a weight > 0")
    return {kind: mix[kind] / total for kind in KINDS if mix.get(kind, 0) > 0}


class MathRecipe:
    """Train, validation and held-out problems fixed by `seed`.

    `validation` is for choosing when to stop the warm-up (the probe stopped at ~30% greedy accuracy on 200
    problems), so the held-out accuracy that RL reports was never used to tune anything.
    """

    def __init__(self, seed: int = 0, train_size: int = 20_000, heldout_size: int = 1_000,
                 mix: Mapping[str, float] | None = None, validation_size: int = 200,
                 max_digits: int = DEFAULT_MAX_DIGITS) -> None:
        if not isinstance(max_digits, int) or not 1 <= max_digits <= 6:
            raise UsageError(f"math recipe: max_digits must be an integer in [1, 6], got {max_digits!r}")
        self.max_digits = max_digits
        for name, size in (("train_size", train_size), ("heldout_size", heldout_size),
                           ("validation_size", validation_size)):
            if not isinstance(size, int) or size < 0:
                raise UsageError(f"math recipe: {name} must be an integer >= 0, got {size!r}")
        self.seed = seed
        self.mix = resolve_mix(mix)
        seen: set[str] = set()
        # Held-out and validation are sets of distinct problems; train may repeat a problem (small kinds such as
        # multiplication would run out otherwise) but never one from the other splits.
        self.heldout = self._draw("heldout", heldout_size, seen, distinct=True)
        self.validation = self._draw("validation", validation_size, seen, distinct=True)
        self.train = self._draw("train", train_size, seen, distinct=False)

    @property
    def config(self) -> dict:
        """Everything that determines the problems, JSON-ready: hash it to key a cache on the data."""
        return {"recipe": "math", "generator": GENERATOR_VERSION, "seed": self.seed, "mix": dict(self.mix),
                "max_digits": self.max_digits, "train_size": len(self.train), "heldout_size": len(self.heldout),
                "validation_size": len(self.validation)}

    def _draw(self, split: str, size: int, seen: set[str], *, distinct: bool) -> list[Problem]:
        rng = random.Random(f"precision-engine/math/{GENERATOR_VERSION}/{self.seed}/{split}")
        kinds, weights = list(self.mix), list(self.mix.values())
        excluded = frozenset(seen)
        problems: list[Problem] = []
        draws_left, rejected = _MAX_DRAWS_PER_PROBLEM * max(size, 1), 0
        while len(problems) < size:
            if draws_left == 0 or rejected == _MAX_REJECTS_IN_A_ROW:
                more = "" if set(kinds) == {"add"} else "raise the weight of 'add' (the most distinct problems) or "
                raise UsageError(f"math recipe: cannot draw {size} {split} problems from mix {self.mix} "
                                 f"disjoint from the other splits (got {len(problems)}); {more}shrink the split")
            draws_left -= 1
            problem = _GENERATORS[rng.choices(kinds, weights)[0]](rng, self.max_digits)
            if problem.prompt in excluded or (distinct and problem.prompt in seen):
                rejected += 1
                continue
            rejected = 0
            seen.add(problem.prompt)
            problems.append(problem)
        return problems
