"""How a policy reaches verl's worker processes: two environment variables, set by the launcher and forwarded
to every Ray actor through `ray_kwargs.ray_init.runtime_env.env_vars`.

    PRECISION_POLICY           a policy file (the launcher writes the fully merged policy into the run dir)
    PRECISION_ROLLOUT_WEIGHTS  `exact`: the engine sends our FP8 bytes (default);
                               `verl`: it sends master weights and verl's `rollout.quantization=fp8` re-quantizes

Without PRECISION_POLICY the engine is verl's FSDP engine, unchanged: installing this package must not alter
runs that do not ask for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from precision_engine.errors import UsageError
from precision_engine.policy.model import Policy

POLICY_ENV = "PRECISION_POLICY"
ROLLOUT_WEIGHTS_ENV = "PRECISION_ROLLOUT_WEIGHTS"
EXACT, VERL = "exact", "verl"


@dataclass(frozen=True)
class PolicyRuntime:
    policy: Policy
    rollout_weights: str = EXACT  # EXACT or VERL

    @classmethod
    def from_env(cls, environ=os.environ) -> PolicyRuntime | None:
        source = environ.get(POLICY_ENV)
        if not source:
            return None
        weights = environ.get(ROLLOUT_WEIGHTS_ENV, EXACT)
        if weights not in (EXACT, VERL):
            raise UsageError(f"{ROLLOUT_WEIGHTS_ENV}={weights!r}: expected {EXACT!r} or {VERL!r}")
        from precision_engine.policy import load_policy

        return cls(load_policy(source), weights)

    def env(self, policy_file: str) -> dict[str, str]:
        return {POLICY_ENV: policy_file, ROLLOUT_WEIGHTS_ENV: self.rollout_weights}
