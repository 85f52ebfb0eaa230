"""The generated dataset: determinism by seed, disjoint splits, the mix, exact answers."""

import collections
import os
import subprocess
import sys

import pytest

from precision_engine.errors import UsageError
from precision_engine.rl.recipes.math import DEFAULT_MIX, KINDS, MathRecipe, Problem, extract_answer, format_prompt
from precision_engine.rl.recipes.math.problems import GENERATOR_VERSION, resolve_mix


def _prompts(problems):
    return [p.prompt for p in problems]


def test_same_seed_same_problems_different_seed_different():
    a, b = MathRecipe(seed=3, train_size=500), MathRecipe(seed=3, train_size=500)
    assert a.train == b.train and a.heldout == b.heldout and a.validation == b.validation
    c = MathRecipe(seed=4, train_size=500)
    assert _prompts(c.heldout) != _prompts(a.heldout) and _prompts(c.train) != _prompts(a.train)


def test_problems_do_not_depend_on_the_global_rng_or_the_process():
    """A fresh interpreter with a different hash seed and a reseeded global RNG draws the same problems."""
    code = ("import random; random.seed(123); from precision_engine.rl.recipes.math import MathRecipe; "
            "r = MathRecipe(seed=7, train_size=50, heldout_size=50); "
            "print(repr([p.prompt for p in r.train + r.heldout]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "99"}).stdout
    here = MathRecipe(seed=7, train_size=50, heldout_size=50)
    assert out.strip() == repr(_prompts(here.train + here.heldout))


def test_splits_are_disjoint_and_heldout_distinct():
    recipe = MathRecipe(seed=0, train_size=5_000)
    heldout, validation, train = (set(_prompts(s)) for s in (recipe.heldout, recipe.validation, recipe.train))
    assert len(recipe.heldout) == 1_000 and len(heldout) == 1_000
    assert len(recipe.validation) == 200 and len(validation) == 200
    assert not heldout & train and not heldout & validation and not validation & train


def test_heldout_does_not_depend_on_train_size_and_train_is_a_stream():
    small, large = MathRecipe(seed=1, train_size=100), MathRecipe(seed=1, train_size=1_000)
    assert small.heldout == large.heldout
    assert large.train[:100] == small.train


def test_answers_are_exact_and_targets_extract_to_them():
    for p in MathRecipe(seed=2, train_size=2_000).train:
        assert isinstance(p, Problem) and p.kind in KINDS
        assert extract_answer(p.target) == p.answer
        if p.kind != "word":
            a, op, b = p.prompt.rstrip("=").partition({"add": "+", "sub": "-", "mul": "*"}[p.kind])
            assert int(p.answer) == {"+": int.__add__, "-": int.__sub__, "*": int.__mul__}[op](int(a), int(b))
        assert int(p.answer) >= 0
        assert format_prompt(p) == p.prompt


def test_word_problems_read_as_sentences():
    words = [p for p in MathRecipe(seed=0, train_size=2_000, mix={"word": 1}).train]
    assert all(p.kind == "word" and p.prompt.endswith("? Answer: ") for p in words)
    tom = [p for p in words if "buys" in p.prompt][0]
    numbers = [int(w.strip(",.;")) for w in tom.prompt.split() if w.strip(",.;").isdigit()]
    assert int(tom.answer) == sum(numbers)


def test_a_template_that_frames_the_answer_drops_the_word_problems_cue():
    """With an HF tokenizer's "Question: {prompt}\\nAnswer:" a word problem read "... Answer: \\nAnswer:"."""
    word = MathRecipe(seed=0, train_size=1, heldout_size=0, validation_size=0, mix={"word": 1}).train[0]
    question = word.prompt.removesuffix(" Answer: ")
    assert format_prompt(word, "Question: {prompt}\nAnswer:") == f"Question: {question}\nAnswer:"
    assert format_prompt(word) == word.prompt  # the built-in model reads the cue as its answer frame
    assert format_prompt(word, "<q>{prompt}  ") == f"<q>{word.prompt}  "  # nothing framed after the prompt
    assert format_prompt(Problem("3+4=", "7", "7"), "Question: {prompt}\nAnswer:") == "Question: 3+4=\nAnswer:"


def test_mix_is_configurable_and_validated():
    # 3-digit operands: with 2 the held-out split takes most of the 100 one-digit sums, which train then rejects
    counts = collections.Counter(p.kind for p in MathRecipe(seed=0, train_size=4_000, max_digits=3).train)
    assert counts["add"] / 4_000 == pytest.approx(DEFAULT_MIX["add"], abs=0.03)
    only_add = MathRecipe(seed=0, train_size=200, heldout_size=50, mix={"add": 2, "mul": 0})
    assert only_add.mix == {"add": 1.0} and {p.kind for p in only_add.train} == {"add"}
    with pytest.raises(UsageError, match="unknown kind 'ad'.*did you mean 'add'"):
        MathRecipe(mix={"ad": 1})
    with pytest.raises(UsageError, match="weight of 'sub' must be a finite number >= 0"):
        MathRecipe(mix={"sub": -1})
    with pytest.raises(UsageError, match="weight of 'add' must be a finite number"):
        MathRecipe(mix={"add": float("inf")})
    with pytest.raises(UsageError, match="at least one kind"):
        MathRecipe(mix={"sub": 0})
    huge = resolve_mix({"add": 1e308, "sub": 1e308})  # finite weights whose sum overflows: the same proportions
    assert huge == {"add": 0.5, "sub": 0.5}


def test_a_mix_that_runs_out_of_distinct_problems_says_so():
    # 1-2 digit x 1 digit multiplication has 1,000 distinct prompts.
    with pytest.raises(UsageError, match="cannot draw 2000 heldout problems.*raise the weight of 'add'"):
        MathRecipe(train_size=0, heldout_size=2_000, mix={"mul": 1})
    with pytest.raises(UsageError, match=r"cannot draw 20000 heldout .*\(got \d+\); shrink the split"):
        MathRecipe(train_size=0, heldout_size=20_000, validation_size=0, max_digits=2, mix={"add": 1})


def test_config_names_what_determines_the_problems():
    recipe = MathRecipe(seed=5, train_size=10, heldout_size=10, validation_size=0)
    assert recipe.config == {"recipe": "math", "generator": GENERATOR_VERSION, "seed": 5, "mix": recipe.mix,
                             "max_digits": 2, "train_size": 10,
                             "heldout_size": 10, "validation_size": 0}
