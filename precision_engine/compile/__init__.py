"""The compiler: a policy resolved against a model inventory into a per-module plan, plus plan/policy diffs.

Torch-free: the inventory is plain data, so plans compile, render and diff without building anything.
"""

from precision_engine.compile.checks import model_diagnostics
from precision_engine.compile.diff import PlanDiff, PolicyDiff, diff_plans, diff_policies
from precision_engine.compile.plan import ModulePlan, PhasePlan, Plan, compile_plan

__all__ = [
    "ModulePlan",
    "PhasePlan",
    "Plan",
    "PlanDiff",
    "PolicyDiff",
    "compile_plan",
    "diff_plans",
    "diff_policies",
    "model_diagnostics",
]
