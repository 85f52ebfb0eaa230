"""Fixtures: the two schemes of the papers as Policy objects, and session-wide model inventories."""

from dataclasses import replace

import pytest
from compile_policies import JET_SPEC, KEEP_BF16, W8A8, make_policy, rule

from precision_engine.models import load_inventory
from precision_engine.policy.model import NumericsSpec, Policy


@pytest.fixture
def unified() -> Policy:
    """Jet-RL: one FP8 rule set for both phases; embeddings, lm_head, norms and the router stay bf16."""
    rules = (
        rule("unified[0]", *KEEP_BF16, line=10),
        rule("unified[1]", "re:.*_proj", "re:.*experts", line=12, linear=JET_SPEC),
    )
    return make_policy({"unified": rules}, {"train": "unified", "rollout": "unified"}, name="unified")


@pytest.fixture
def naive() -> Policy:
    """BF16 training, FP8 W8A8 rollout: what Jet-RL shows diverging."""
    train = (rule("train[0]", *KEEP_BF16),)
    rollout = (rule("rollout[0]", *KEEP_BF16), rule("rollout[1]", "re:.*_proj", "re:.*experts", linear=W8A8))
    return make_policy({"train": train, "rollout": rollout}, {"train": "train", "rollout": "rollout"}, name="naive")


@pytest.fixture
def batch_variant(unified) -> Policy:
    return replace(unified, numerics=NumericsSpec(batch_invariant=False))


@pytest.fixture(scope="session")
def llama8b():
    return load_inventory("llama-3.1-8b")


@pytest.fixture(scope="session")
def moe30b():
    return load_inventory("qwen3-30b-a3b")


@pytest.fixture(scope="session")
def tiny_moe():
    return load_inventory("tiny-qwen3-moe")
