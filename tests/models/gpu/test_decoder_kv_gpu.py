"""A unified FP8-KV policy's training step on the GPU: k/v rounded through scales calibrated on the CPU, eager and
captured in a CUDA graph (`Decoder.kv_scales` keeps them on the model's device; read from host memory, each layer
waited on the GPU and capture failed: jetrl_unified_kv's batch-invariant block, forty-third session)."""

import pytest
import torch

from precision_engine.bench.gemm import capture_graph
from precision_engine.models.decoder import Decoder, calibrate_kv_scales
from precision_engine.policy import KVScale

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("batch_invariant", [True, False])
def test_a_training_step_with_fp8_kv_rounding_replays_in_a_graph(batch_invariant):
    model = Decoder.from_config("tiny-llama", seed=3, dtype="bf16", device="cuda", batch_invariant=batch_invariant)
    ids = torch.randint(0, model.config.vocab_size, (2, 48), device="cuda")
    scales = calibrate_kv_scales(model, ids, mode=KVScale.PER_TENSOR)
    assert scales.k.device.type == "cpu"  # as calibration hands them over
    model.kv_scales = scales
    assert model.kv_scales.k.is_cuda and model.kv_scales.v.is_cuda
    model.train()
    hidden = model.config.hidden_size
    sets = [(torch.randn(2, 48, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True),
             torch.randn(2, 48, hidden, device="cuda", dtype=torch.bfloat16)) for _ in range(2)]

    def step(x, dy):
        x.grad = None
        model.layers(x).backward(dy)

    step(*sets[0])
    want = sets[0][0].grad.clone()
    graph = capture_graph(step, sets)
    graph.replay()
    torch.cuda.synchronize()
    if batch_invariant:
        assert torch.equal(sets[0][0].grad, want)
    else:  # flash attention's backward adds dq atomically
        torch.testing.assert_close(sets[0][0].grad, want, rtol=2e-2, atol=2e-2)
