"""The identity check: rollout logprobs vs the training forward's, module by module."""

from precision_engine.verify.identity import IdentityReport, LayerDiff, LogprobDiff, check_identity, random_sequences

__all__ = ["IdentityReport", "LayerDiff", "LogprobDiff", "check_identity", "random_sequences"]
