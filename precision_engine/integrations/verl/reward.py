"""The math recipe's reward as verl calls a `custom_reward_function`: `compute_score(data_source,
solution_str, ground_truth, extra_info)` (verl's naive reward manager passes these keywords). The launcher
points `reward.custom_reward_function.path` at `pkg://precision_engine.integrations.verl.reward`."""

from __future__ import annotations

import math
import numbers
import warnings

from precision_engine.rl.recipes.math import reward


def _answer_text(ground_truth: object) -> str | None:
    """`ground_truth` as answer text, as the recipe's loader reads it: verl's rows often carry numbers (18, 18.0,
    numpy's), which become '18'. None for what is no answer: a bool, NaN, an infinity, a list."""
    if isinstance(ground_truth, str):
        return ground_truth
    if isinstance(ground_truth, numbers.Real) and not isinstance(ground_truth, bool) and math.isfinite(ground_truth):
        return str(ground_truth)
    return None


def compute_score(data_source: str, solution_str: str, ground_truth: str | float, extra_info: dict | None = None,
                  **kwargs) -> float:
    """1.0 when the completion's final answer equals `ground_truth`, else 0.0 (the builtin trainer's reward). A
    ground truth that is no answer scores 0.0 with a warning, as verl's graders do, rather than failing the run."""
    answer = _answer_text(ground_truth)
    if answer is None:
        warnings.warn(f"verl reward: a ground_truth of type {type(ground_truth).__name__} is no answer; scoring 0",
                      stacklevel=2)
        return 0.0
    return reward(solution_str, answer)
