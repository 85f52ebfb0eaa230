"""The identity check: unified FP8 gives bitwise-equal rollout logprobs on the CPU, the naive scheme does not."""

import pytest
import torch

from precision_engine.models.loader import build_model
from precision_engine.pipeline import compile_for_model
from precision_engine.verify import check_identity, random_sequences

SEQUENCES = random_sequences(512, 2, 32, seed=7)


def check(policy, model_spec, sequences, *, device="cpu", **kwargs):
    """check_identity on a fresh random-weight model: one model input, the plan compiled for it."""
    model = build_model(model_spec, device=device, dtype="bf16", seed=0)
    return check_identity(compile_for_model(policy, model_spec), model, sequences, **kwargs)


@pytest.fixture(scope="module")
def unified():
    return check("jetrl_unified", "tiny-llama", SEQUENCES)


def test_unified_prefill_bitwise_identical(unified):
    assert unified.plan_identical and unified.differing_modules == ()
    assert unified.prefill.covered and unified.prefill.bitwise
    assert unified.prefill.max_abs_dlogp == 0.0 and unified.prefill.mean_kl == 0.0
    assert unified.prefill.tokens == 2 * 31
    assert len(unified.layers) == 14 + 2 + 1  # 7 projections x 2 layers, 2 decoder layers, lm_head
    assert all(layer.bitwise and layer.max_abs == 0.0 for layer in unified.layers)
    assert unified.promise_holds


def test_unified_decode_reported_not_promised(unified):
    decode = unified.decode
    assert decode is not None and not decode.covered and "attention" in decode.why_not_covered
    assert decode.tokens == 2 * 16
    assert decode.max_abs_dlogp < 0.1  # attention reduction order only: small, finite


def test_naive_shows_the_mismatch():
    report = check("fp8_rollout_naive", "tiny-qwen3", SEQUENCES, decode=False)
    assert not report.plan_identical and len(report.differing_modules) == 14
    assert not report.prefill.bitwise
    assert report.prefill.max_abs_dlogp > 1e-3 and report.prefill.mean_kl > 0
    assert not any(layer.bitwise for layer in report.layers if "proj" in layer.name)
    assert report.decode is None and report.promise_holds  # nothing was promised


def test_fp8_kv_cache_is_outside_the_promise():
    report = check("jetrl_unified_kv", "tiny-llama", SEQUENCES, decode=False)
    assert report.plan_identical and not report.prefill.covered and "KV cache" in report.prefill.why_not_covered
    assert not report.prefill.bitwise and report.promise_holds
    first = {layer.name: layer for layer in report.layers}
    # projections that read the residual stream before any attention are still bitwise equal
    assert first["model.layers.0.self_attn.q_proj"].bitwise and first["model.layers.0.self_attn.v_proj"].bitwise
    assert not first["model.layers.0.self_attn.o_proj"].bitwise


def test_report_serializes():
    import json

    report = check("bf16_baseline", "tiny-llama", SEQUENCES[:1, :8], layers=False)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["prefill"]["bitwise"] and data["promise_holds"] and data["layers"] == []


@pytest.mark.gpu
def test_unified_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    report = check("jetrl_unified", "tiny-llama", SEQUENCES, device="cuda")
    assert report.prefill.bitwise, report.prefill


def test_nan_logits_are_refused_not_bitwise_equal():
    """NaN logits are byte-equal to NaN logits: a NaN weight read as "bitwise: true" and "promise holds"."""
    from precision_engine.errors import NonFiniteError

    model = build_model("tiny-llama", device="cpu", dtype="bf16", seed=0)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[0, 0] = float("nan")
    plan = compile_for_model("jetrl_unified", "tiny-llama")
    with pytest.raises(NonFiniteError, match=r"the training forward gives \d+ of \d+ logits NaN or Inf"):
        check_identity(plan, model, SEQUENCES, decode=False, layers=False)
