"""`rollout_tensors` (no verl needed): from a master-weight stream it yields exactly what our own export and
rollout rewrite produce: same names, same FP8 bytes and scales, bit for bit. Tiny Llama, < 1 s."""

import pytest
import torch

from precision_engine.compile import compile_plan
from precision_engine.errors import ModelError
from precision_engine.integrations import iter_rollout_weights
from precision_engine.integrations.verl.weight_sync import rollout_tensors
from precision_engine.models.loader import build_model, load_inventory
from precision_engine.policy import load_policy
from precision_engine.rewrite import apply


@pytest.mark.parametrize("name", ["jetrl_unified", "fp8_rollout_naive"])
def test_stream_equals_our_rollout_export_bitwise(name):
    plan = compile_plan(load_policy(name), load_inventory("tiny-llama"))
    master = build_model("tiny-llama", device="cpu", dtype="fp32", seed=3)
    stream = dict(rollout_tensors(master.state_dict().items(), plan, param_dtype=torch.bfloat16))
    rollout = build_model("tiny-llama", device="cpu", dtype="fp32", seed=3).to(torch.bfloat16)
    apply(plan, rollout, "rollout")
    expected = dict(iter_rollout_weights(rollout, plan))
    assert stream.keys() >= expected.keys()
    for key, tensor in expected.items():
        got = stream[key]
        assert got.dtype == tensor.dtype, key
        assert torch.equal(got.view(torch.uint8), tensor.view(torch.uint8)), key


def test_a_missing_fp8_weight_is_an_error_at_the_end_of_the_stream():
    plan = compile_plan(load_policy("jetrl_unified"), load_inventory("tiny-llama"))
    master = build_model("tiny-llama", device="cpu", dtype="fp32", seed=0).state_dict()
    renamed = ((f"module.{k}", v) for k, v in master.items())
    with pytest.raises(ModelError, match="sent no weight for 14 module"):
        list(rollout_tensors(renamed, plan))
