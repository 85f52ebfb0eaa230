"""A rewritten Hugging Face model under torch.compile, each decoder layer compiled on its own with
`fullgraph=True` (as torchtitan compiles blocks): one graph per layer holding the FP8 ops, and eager's loss,
gradients and rollout logits bitwise. The CPU goes through the FP8 custom ops as a GPU does (`helpers`); on a GPU
tests/numerics/gpu/test_compile_gpu.py compiles the linears themselves. About 5-10 s per model (compilation).
"""

import pytest
import torch

from precision_engine.compile import compile_plan
from precision_engine.models import build_model, load_inventory
from precision_engine.policy import load_policy
from precision_engine.rewrite import apply

from helpers import GraphRecorder

TOKENS = torch.randint(0, 512, (2, 48), generator=torch.Generator().manual_seed(1))


def _rewritten(spec: str, phase: str):
    model = build_model(spec, device="cpu", dtype="bf16", seed=0)
    apply(compile_plan(load_policy("jetrl_unified"), load_inventory(spec)), model, phase)
    return model


def _compile_layers(model, recorder):
    layers = model.model.layers
    for i, layer in enumerate(layers):
        layers[i] = torch.compile(layer, backend=recorder, fullgraph=True)
    return len(layers)


def _loss_and_grads(model):
    loss = model(TOKENS, labels=TOKENS).loss
    loss.backward()
    return [loss.detach()] + [p.grad for p in model.parameters()]


@pytest.mark.parametrize("spec", ["tiny-llama", "tiny-qwen3"])
def test_compiled_layers_train_with_eager_bits(spec):
    torch._dynamo.reset()
    eager = _loss_and_grads(_rewritten(spec, "train"))
    model, recorder = _rewritten(spec, "train"), GraphRecorder()
    layers = _compile_layers(model, recorder)
    compiled = _loss_and_grads(model)
    assert len(recorder.code) == layers
    assert all("precision_engine.fp8_gemm" in code and "precision_engine.quantize" in code for code in recorder.code)
    assert len(eager) == len(compiled) and all(torch.equal(a, b) for a, b in zip(eager, compiled))


def test_compiled_layers_give_the_rollout_logits_bitwise():
    torch._dynamo.reset()
    with torch.no_grad():
        eager = _rewritten("tiny-llama", "rollout")(TOKENS).logits
        model, recorder = _rewritten("tiny-llama", "rollout"), GraphRecorder()
        layers = _compile_layers(model, recorder)
        compiled = model(TOKENS).logits
    assert len(recorder.code) == layers and torch.equal(eager, compiled)
