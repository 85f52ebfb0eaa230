"""Where decode and teacher forcing part: the first op whose output differs between the decoder's two paths.

    PYTHONPATH=$PWD python scripts/diagnose_onpolicy_gpu.py [--device cuda] [--layers 2] [--prompt 100] [--new 64]

A Llama-3.1-8B-shaped Decoder (hidden 4096, 32/8 heads, D 128, vocabulary 128256; `--layers` layers, random
BF16 weights, batch_invariant, bf16_baseline's rollout rules) runs the same `--rows` sequences three ways:
- `train`: `forward` with autograd on, as the trainer's `token_logprobs` runs it (RoPE in torch ops);
- `full`: `forward` without autograd (RoPE through `invariant.rope`, the Triton kernel on CUDA);
- `cached`: a `forward_cached` prefill of the first `--prompt` tokens into a KVCache, then one
  `forward_cached` per token (read_len = the whole cache, as the engine's CUDA-graph step reads it).
Every op of the decoder (each norm, linear, RoPE, attention, silu) is recorded per token, and each path is
compared with `train` op by op in execution order, positions of the prefill and of the decode apart; the cache's
k/v are compared with the k (after RoPE) and v of `train`. Then isolated checks of single ops on identical
inputs (RoPE kernel against its torch ops, attention decode against full). The first op that differs, with
identical inputs, is the culprit. A few seconds on an H200 after Triton compiles.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from precision_engine.models import decoder as decoder_module
from precision_engine.models.loader import resolve_config
from precision_engine.numerics import invariant
from precision_engine.rl.kv_cache import KVCache

LAYER_OPS = ("in_norm", "q", "k", "v", "rope_q", "rope_k", "attn", "o", "post_norm", "gate", "silu", "up", "down")
HEAD_OPS = ("final_norm", "lm_head")
TOKEN_MAJOR = ("rope_q", "rope_k", "attn")  # [B, H, T, D] outputs, recorded as [B, T, H, D]


class Recorder:
    """Outputs of the decoder's ops, in call order, while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.calls: list[tuple[str, torch.Tensor]] = []

    def add(self, kind: str, out: torch.Tensor) -> None:
        if self.on:
            self.calls.append((kind, out.detach().clone()))

    def take(self) -> list[torch.Tensor]:
        out = [t for _, t in self.calls]
        self.calls = []
        return out


def instrument(recorder: Recorder) -> None:
    """Wrap `_Ops`' methods and `invariant.rope` (the decoder calls both through their modules)."""
    # On the GPU without autograd a norm after a residual add runs in the add's kernel, unrecorded; the
    # separate ops give the same bits.
    decoder_module._Ops.fused_add = lambda self, x: False
    for name in ("linear", "norm", "silu", "attention"):
        original = getattr(decoder_module._Ops, name)

        def wrapped(self, *args, _original=original, _name=name, **kwargs):
            out = _original(self, *args, **kwargs)
            recorder.add(_name, out)
            return out

        setattr(decoder_module._Ops, name, wrapped)
    rope = invariant.rope

    def recorded_rope(x, cos, sin):
        out = rope(x, cos, sin)
        recorder.add("rope", out)
        return out

    invariant.rope = recorded_rope
    # The decoder ropes q and k in one launch on the GPU; here as two recorded calls (the same bits).
    invariant.rope_qk = lambda q, k, cos, sin: (invariant.rope(q, cos, sin), invariant.rope(k, cos, sin))


def labels(layers: int) -> list[str]:
    return [f"L{i}.{op}" for i in range(layers) for op in LAYER_OPS] + list(HEAD_OPS)


def token_major(outs: list[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """label -> [B, T, ...] fp32."""
    table = {}
    for label, out in outs:
        if label.split(".")[-1] in TOKEN_MAJOR:
            out = out.transpose(1, 2)
        table[label] = out.float()
    return table


def run_forward(model, ids, recorder, layers, *, grad: bool):
    """`forward` with autograd on (the trainer's `token_logprobs`) or off, every op recorded."""
    with torch.set_grad_enabled(grad):
        recorder.on = True
        model(ids)
        recorder.on = False
    return token_major(list(zip(labels(layers), recorder.take())))


def run_cached(model, ids, prompt, recorder, layers, cache_multiple=128):
    """Prefill then token-by-token decode; per-op outputs concatenated along T, and the cache."""
    b, length = ids.shape
    device = ids.device
    cache = KVCache.for_model(model, b, -(-length // cache_multiple) * cache_multiple)
    steps = []
    with torch.no_grad():
        positions = torch.arange(prompt, device=device).expand(b, prompt)
        recorder.on = True
        model.forward_cached(ids[:, :prompt], positions, torch.full((b,), prompt, device=device), cache,
                             read_len=cache.max_len)
        steps.append(token_major(list(zip(labels(layers), recorder.take()))))
        for t in range(prompt, length):
            pos = torch.full((b, 1), t, device=device)
            model.forward_cached(ids[:, t:t + 1], pos, pos[:, 0] + 1, cache, read_len=cache.max_len)
            steps.append(token_major(list(zip(labels(layers), recorder.take()))))
        recorder.on = False
    return {k: torch.cat([s[k] for s in steps], dim=1) for k in steps[0]}, cache


def compare(name, ref, got, prompt):
    """Rows of (label, prefill max|d|, decode max|d|, mismatched decode positions) and the first mismatch."""
    first = None
    rows = []
    for label in ref:
        a, b = ref[label], got[label]
        d = (a - b).abs()
        d = torch.where(torch.isnan(a) & torch.isnan(b), 0.0, d.nan_to_num(nan=float("inf")))
        per_pos = d.flatten(2).amax(-1).amax(0)  # [T]
        pre, dec = float(per_pos[:prompt].max()), float(per_pos[prompt:].max()) if per_pos.numel() > prompt else 0.0
        bad = (per_pos > 0).nonzero().flatten().tolist()
        rows.append((label, pre, dec, bad))
        if first is None and bad:
            first = (label, pre, dec, bad[:8], len(bad))
    print(f"\n== {name} against train (autograd on, torch RoPE) ==")
    print(f"{'op':<16}{'prefill max|d|':>16}{'decode max|d|':>16}  mismatched positions")
    for label, pre, dec, bad in rows:
        print(f"{label:<16}{pre:>16.3g}{dec:>16.3g}  {len(bad)} {bad[:6]}")
    print(f"FIRST DIFFERING OP ({name}): {first}")
    return first


def check_cache(ref, cache, layers, prompt):
    print("\n== KV cache slots against train's k (after RoPE) and v ==")
    for i in range(layers):
        length = ref[f"L{i}.rope_k"].shape[1]
        k_cache = cache.k[i, :, :, :length].transpose(1, 2).float()
        v_cache = cache.v[i, :, :, :length].transpose(1, 2).float()
        v_ref = ref[f"L{i}.v"].view_as(v_cache)
        for name, a, b in (("k", ref[f"L{i}.rope_k"], k_cache), ("v", v_ref, v_cache)):
            per_pos = (a - b).abs().flatten(2).amax(-1).amax(0)
            bad = (per_pos > 0).nonzero().flatten().tolist()
            print(f"L{i}.{name}: max|d| {float(per_pos.max()):.3g}, {len(bad)} positions differ {bad[:8]}")


def isolated_checks(model, device, length):
    """Single ops on identical inputs: RoPE kernel vs its torch ops (T = 1 and T = length), attention decode vs
    full over the same k/v."""
    print("\n== isolated ops ==")
    c = model.config
    g = torch.Generator(device=device).manual_seed(1)
    for t in (1, length):
        x = torch.randn((3, t, c.num_heads, c.head_dim), generator=g, device=device).to(torch.bfloat16)
        pos = torch.randint(0, 300, (3, t), generator=g, device=device)
        cos, sin = model._cos_sin(pos, x.dtype, 512)
        with torch.no_grad():
            kernel = invariant.rope(x, cos, sin)
        xt = x.transpose(1, 2)
        half = c.head_dim // 2
        torch_ops = xt * cos[:, None] + torch.cat((-xt[..., half:], xt[..., :half]), dim=-1) * sin[:, None]
        d = (kernel.float() - torch_ops.float()).abs().max()
        print(f"rope T={t}: kernel vs torch ops max|d| {float(d):.3g}, equal {torch.equal(kernel, torch_ops)}, "
              f"kernel strides {kernel.stride()}, torch strides {torch_ops.stride()}")
    q = torch.randn((2, c.num_heads, length, c.head_dim), generator=g, device=device).to(torch.bfloat16)
    k = torch.randn((2, c.num_kv_heads, length, c.head_dim), generator=g, device=device).to(torch.bfloat16)
    v = torch.randn_like(k)
    q_pos = torch.arange(length, device=device).expand(2, length)
    kv_len = torch.full((2,), length, device=device)
    full = invariant.attention(q, k, v, q_pos, kv_len, scale=model.scaling)
    worst = 0.0
    for t in range(0, length, max(1, length // 16)):
        one = invariant.attention(q[:, :, t:t + 1], k, v, q_pos[:, t:t + 1], torch.full((2,), t + 1, device=device),
                                  scale=model.scaling)
        worst = max(worst, float((one.float() - full[:, :, t:t + 1].float()).abs().max()))
    print(f"attention decode (kv_len = t + 1) vs full: max|d| {worst:.3g}")


def engine_check(model, device, new):
    """The failing test in small: Engine samples (CUDA graph on the GPU, then eagerly), the model scores the rows
    with autograd on, left-padded in one batch; where the recorded logprobs differ, by position."""
    from precision_engine.rl.engine import Engine
    from precision_engine.rl.logprobs import token_logprobs

    generator = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, model.config.vocab_size, (n,), generator=generator).tolist() for n in (9, 100, 33)]
    print("\n== engine: sampled logprobs against token_logprobs (autograd on, left padding) ==")
    for graphs in (True, False):
        rollout = Engine(model, cuda_graphs=graphs).generate(prompts, n=2, max_new_tokens=new, temperature=0.8,
                                                            seed=5)
        lengths = rollout.attention_mask.sum(1)
        width = int(lengths.max()) + 2
        ids = torch.zeros((len(lengths), width), dtype=torch.long, device=device)
        mask = torch.zeros_like(ids)
        for j, n in enumerate(lengths.tolist()):
            ids[j, width - n:], mask[j, width - n:] = rollout.token_ids[j, :n], 1
        with torch.enable_grad():
            logp = token_logprobs(model, ids, mask, temperature=0.8).detach()
        for j, n in enumerate(lengths.tolist()):
            gen = rollout.generated_mask[j, :n]
            d = (logp[j, width - n:] - rollout.logprobs[j, :n]).abs() * gen
            bad = (d > 0).nonzero().flatten().tolist()
            print(f"graphs={graphs} row {j} prompt {int(rollout.prompt_lengths[j])}: max|d logp| {float(d.max()):.3g}"
                  f", {len(bad)}/{int(gen.sum())} differ, first positions {bad[:6]}")


def build(layers: int, device: str, tiny: bool):
    from precision_engine.bench.rollout import random_decoder
    from precision_engine.pipeline import compile_for_model
    from precision_engine.rewrite import apply

    config = resolve_config("llama-3.1-8b")
    config["num_hidden_layers"] = layers
    if tiny:  # a CPU dry run of the script itself
        config.update(hidden_size=256, intermediate_size=512, vocab_size=1024)
    spec = Path(tempfile.mkdtemp()) / "config.json"
    spec.write_text(json.dumps(config))
    model = random_decoder(config, device=device, seed=0)
    apply(compile_for_model("bf16_baseline", str(spec)), model, "rollout")
    model.batch_invariant = True
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=100)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--tiny", action="store_true", help="hidden 256, vocabulary 1024: a dry run on the CPU")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = build(args.layers, args.device, args.tiny)
    length = args.prompt + args.new
    ids = torch.randint(1, model.config.vocab_size, (args.rows, length), generator=torch.Generator().manual_seed(3)).to(args.device)
    recorder = Recorder()
    instrument(recorder)
    train = run_forward(model, ids, recorder, args.layers, grad=True)
    full = run_forward(model, ids, recorder, args.layers, grad=False)
    cached, cache = run_cached(model, ids, args.prompt, recorder, args.layers)
    firsts = {"full (no autograd)": compare("full (no autograd)", train, full, args.prompt),
              "cached (prefill + decode)": compare("cached (prefill + decode)", train, cached, args.prompt),
              "cached vs full": compare("cached vs full", full, cached, args.prompt)}
    check_cache(train, cache, args.layers, args.prompt)
    isolated_checks(model, args.device, length)
    engine_check(model, args.device, args.new)
    logp = {name: invariant.log_softmax(t["lm_head"], 0.8) for name, t in (("train", train), ("cached", cached))}
    print(f"\nlog_softmax(logits / 0.8) train vs cached: max|d logp| "
          f"{float((logp['train'] - logp['cached']).abs().max()):.3g}")
    print("\nSUMMARY " + json.dumps({k: None if v is None else v[0] for k, v in firsts.items()}))


if __name__ == "__main__":
    main()
