"""The math reward as verl's `custom_reward_function`: numeric ground truths, as verl's parquet rows carry them."""

import math

import numpy as np
import pytest

from precision_engine.integrations.verl.reward import compute_score


@pytest.mark.parametrize("ground_truth", ["18", " 18 ", 18, 18.0, np.int64(18), np.float64(18.0)])
def test_a_numeric_ground_truth_scores_like_the_loader_reads_it(ground_truth):
    assert compute_score("precision-engine/math", "#### 18", ground_truth) == 1.0
    assert compute_score("precision-engine/math", "#### 19", ground_truth) == 0.0


def test_a_fractional_ground_truth():
    assert compute_score("precision-engine/math", "\\boxed{\\frac{5}{2}}", 2.5, {}) == 1.0


@pytest.mark.parametrize("ground_truth", [True, math.nan, math.inf, None, ["18"]])
def test_what_is_no_answer_scores_zero_with_a_warning(ground_truth):
    with pytest.warns(UserWarning, match="no answer"):
        assert compute_score("precision-engine/math", "#### 1", ground_truth) == 0.0
