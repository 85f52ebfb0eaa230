"""The math recipe's reward as verl calls a `custom_reward_function`: `compute_score(data_source,
solution_str, ground_truth, extra_info)` (verl's naive reward manager passes these keywords). The launcher
points `reward.custom_reward_function.path` at `pkg://precision_engine.integrations.verl.reward`."""

from __future__ import annotations

from precision_engine.rl.recipes.math import reward


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  **kwargs) -> float:
    """1.0 when the completion's final answer equals `ground_truth`, else 0.0 (the builtin trainer's reward)."""
    return reward(solution_str, ground_truth)
