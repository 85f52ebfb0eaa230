"""The rollout engine on the GPU, Llama-3.1-8B-shaped layers (hidden 4096, 32/8 heads, D 128, intermediate
14336, vocabulary 128256; 2 layers to bound time and memory; random weights drawn on the GPU).

- True on-policy, bitwise: for bf16_baseline, jetrl_unified and jetrl_unified_kv (batch-invariant mode), the
  logprobs the engine records while sampling 4 ragged prompts x 4 samples x 256 tokens (4,096 tokens, CUDA-graph
  decode) equal those of the training-phase model (train mode, autograd on) scoring the sequences with
  `token_logprobs` in shuffled batches of 5 and 16 rows, left- and right-padded with extra columns.
- fp8_rollout_naive (BF16 training, FP8 rollout) shows its mismatch (max |d logp| > 1e-3).
- Graph decode equals eager decode (the same static step run without the graph): tokens and logprobs bitwise,
  in batch-invariant and in fast mode, BF16 and FP8 KV.
- A captured graph is reused across generate calls (shorter prompts included), and after a weight update (FP8 Q(W) re-quantized) or a KV
  recalibration it decodes with the new numbers: equal to eager decoding on the new weights.
About 1-2 minutes on an H200 (most of it Triton compilation on a cold cache).
"""

from __future__ import annotations

import json

import pytest
import torch

from precision_engine.bench.rollout import random_decoder
from precision_engine.models.decoder import calibrate_kv_scales
from precision_engine.models.loader import resolve_config
from precision_engine.numerics.kv_cache import KVScales
from precision_engine.pipeline import compile_for_model
from precision_engine.rewrite import apply, invalidate_weight_caches
from precision_engine.rl.engine import Engine
from precision_engine.rl.logprobs import token_logprobs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

N_SAMPLES, MAX_NEW, TEMPERATURE = 4, 256, 0.8
DEVICE = "cuda"


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    config = resolve_config("llama-3.1-8b")
    config["num_hidden_layers"] = 2
    path = tmp_path_factory.mktemp("llama2l") / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.fixture(scope="module")
def model(spec):
    return random_decoder(resolve_config(spec), device=DEVICE, seed=0)


@pytest.fixture(scope="module")
def prompts():
    generator = torch.Generator().manual_seed(3)
    return [torch.randint(1, 128000, (int(n),), generator=generator).tolist() for n in (9, 100, 33, 64)]


def _rollout_setup(model, spec, policy_name, prompts, *, batch_invariant=True):
    """The model rewritten for the rollout phase in eval mode, and its KV scales (FP8 KV policies)."""
    plan = compile_for_model(policy_name, spec)
    policy = plan.policy
    apply(plan, model, "rollout", numerics=_numerics(policy, batch_invariant))
    model.eval()
    model.batch_invariant = batch_invariant
    model.kv_scales = None
    if not policy.kv_cache.is_fp8:
        return plan, None
    shortest = min(len(p) for p in prompts)
    calibration = torch.tensor([p[:shortest] for p in prompts], device=DEVICE)
    return plan, calibrate_kv_scales(model, calibration, mode=policy.kv_cache.scale)


def _numerics(policy, batch_invariant):
    from dataclasses import replace

    return replace(policy.numerics, batch_invariant=batch_invariant)


def _generate(model, prompts, scales, *, cuda_graphs=True, seed=5, n=N_SAMPLES, max_new=MAX_NEW):
    return Engine(model, kv_scales=scales, cuda_graphs=cuda_graphs).generate(
        prompts, n=n, max_new_tokens=max_new, temperature=TEMPERATURE, seed=seed
    )


def _same(a, b):
    return torch.equal(a.token_ids, b.token_ids) and torch.equal(a.logprobs, b.logprobs)


def _scores(model, plan, scales, rollout):
    """[(batch size, side, logprobs aligned to the rollout)] from the training phase, shuffled batches."""
    apply(plan, model, "train")
    model.train()
    unified = plan.policy.phases["train"] == plan.policy.phases["rollout"]
    model.kv_scales = scales if unified else None
    lengths = rollout.attention_mask.sum(1).tolist()
    rows = [rollout.token_ids[i, : lengths[i]] for i in range(len(lengths))]
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(2)).tolist()
    out = []
    for batch_size in (5, 16):
        for side, extra in (("left", 2), ("right", 3)):
            aligned = torch.zeros_like(rollout.logprobs)
            for first in range(0, len(order), batch_size):
                chunk = order[first : first + batch_size]
                width = max(lengths[i] for i in chunk) + extra
                ids = torch.zeros((len(chunk), width), dtype=torch.long, device=DEVICE)
                mask = torch.zeros_like(ids)
                offsets = []
                for j, i in enumerate(chunk):
                    start = 0 if side == "right" else width - lengths[i]
                    ids[j, start : start + lengths[i]], mask[j, start : start + lengths[i]] = rows[i], 1
                    offsets.append(start)
                logp = token_logprobs(model, ids, mask, temperature=rollout.temperature)
                assert logp.requires_grad  # the trainer's path
                for j, i in enumerate(chunk):
                    aligned[i, : lengths[i]] = logp[j, offsets[j] : offsets[j] + lengths[i]].detach()
                del logp
            out.append((batch_size, side, aligned))
    model.eval()
    model.kv_scales = None
    return out


@pytest.mark.parametrize("policy_name", ["bf16_baseline", "jetrl_unified", "jetrl_unified_kv"])
def test_on_policy_bitwise_over_4096_tokens_and_graph_equals_eager(model, spec, prompts, policy_name):
    plan, scales = _rollout_setup(model, spec, policy_name, prompts)
    rollout = _generate(model, prompts, scales)
    generated = rollout.generated_mask
    assert int(generated.sum()) == len(prompts) * N_SAMPLES * MAX_NEW == 4096
    assert _same(rollout, _generate(model, prompts, scales, cuda_graphs=False))
    for batch_size, side, logp in _scores(model, plan, scales, rollout):
        diff = float((logp[generated] - rollout.logprobs[generated]).abs().max())
        assert torch.equal(logp[generated], rollout.logprobs[generated]), (batch_size, side, diff)


@pytest.mark.parametrize("policy_name", ["jetrl_unified", "jetrl_unified_kv"])
def test_on_policy_bitwise_at_64_decode_rows(model, spec, prompts, policy_name):
    """64 rows decode through the FP8 GEMMs' decode launches at their widest token tiles, every residual add in
    the RMSNorm after it: 4,096 tokens."""
    plan, scales = _rollout_setup(model, spec, policy_name, prompts)
    rollout = _generate(model, prompts, scales, n=16, max_new=64)
    generated = rollout.generated_mask
    assert int(generated.sum()) == len(prompts) * 16 * 64 == 4096
    assert _same(rollout, _generate(model, prompts, scales, cuda_graphs=False, n=16, max_new=64))
    for batch_size, side, logp in _scores(model, plan, scales, rollout):
        diff = float((logp[generated] - rollout.logprobs[generated]).abs().max())
        assert torch.equal(logp[generated], rollout.logprobs[generated]), (batch_size, side, diff)


def test_fp8_rollout_naive_shows_its_mismatch(model, spec, prompts):
    plan, scales = _rollout_setup(model, spec, "fp8_rollout_naive", prompts)
    rollout = _generate(model, prompts, scales)
    generated = rollout.generated_mask
    for _, _, logp in _scores(model, plan, scales, rollout):
        assert float((logp[generated] - rollout.logprobs[generated]).abs().max()) > 1e-3


@pytest.mark.parametrize("policy_name", ["bf16_baseline", "jetrl_unified_kv"])
def test_fast_mode_graph_equals_eager(model, spec, prompts, policy_name):
    _, scales = _rollout_setup(model, spec, policy_name, prompts, batch_invariant=False)
    graphed = _generate(model, prompts, scales)
    assert _same(graphed, _generate(model, prompts, scales, cuda_graphs=False))
    assert int(graphed.generated_mask.sum()) == 4096


def test_graph_is_reused_and_follows_weight_updates_and_recalibration(model, spec, prompts):
    _, scales = _rollout_setup(model, spec, "jetrl_unified_kv", prompts)
    engine = Engine(model, kv_scales=scales)
    kwargs = dict(n=2, max_new_tokens=64, temperature=TEMPERATURE, seed=9)
    first = engine.generate(prompts, **kwargs)
    graph = engine._graph
    shorter = engine.generate([p[:50] for p in prompts], **kwargs)  # a smaller cache need: the same graph
    assert engine._graph is graph
    assert _same(shorter, Engine(model, kv_scales=scales, cuda_graphs=False).generate(
        [p[:50] for p in prompts], **kwargs))

    saved = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():  # an optimizer step: FP8 weights re-quantized on the next forward
        for layer in model.model.layers:
            layer.mlp.down_proj.weight.mul_(1.5)
            layer.self_attn.v_proj.weight.mul_(-1.0)
    invalidate_weight_caches(model)
    engine.kv_scales = KVScales(scales.k * 2, scales.v * 2)  # a recalibration
    updated = engine.generate(prompts, **kwargs)
    assert engine._graph is graph
    reference = Engine(model, kv_scales=engine.kv_scales, cuda_graphs=False).generate(prompts, **kwargs)
    assert _same(updated, reference) and not _same(updated, first)
    with torch.no_grad():
        for param, value in zip(model.parameters(), saved):
            param.copy_(value)
    invalidate_weight_caches(model)


def test_one_new_token_takes_the_prefill_only(model, spec, prompts):
    """max_new_tokens=1 is the prefill's token alone: no decode graph is captured (its warm-up step would write
    column 1 of a one-column state), and it equals the first token of a longer generation."""
    _, scales = _rollout_setup(model, spec, "jetrl_unified_kv", prompts)
    engine = Engine(model, kv_scales=scales)
    one = engine.generate(prompts, n=2, max_new_tokens=1, temperature=TEMPERATURE, seed=5)
    assert engine._graph is None and int(one.generated_mask.sum()) == 2 * len(prompts)
    longer = engine.generate(prompts, n=2, max_new_tokens=8, temperature=TEMPERATURE, seed=5)
    first = longer.generated_mask & (longer.generated_mask.cumsum(1) == 1)
    assert torch.equal(one.token_ids[one.generated_mask], longer.token_ids[first])
    assert torch.equal(one.logprobs[one.generated_mask], longer.logprobs[first])
