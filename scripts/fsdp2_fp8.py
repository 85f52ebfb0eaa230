"""FP8 training under torch's FSDP2 across two processes, checked against one process of the same seed and batch.

    torchrun --nproc_per_node 2 scripts/fsdp2_fp8.py --device cuda --layers 8 --hidden 2048 --out run.json
    torchrun --nproc_per_node 2 scripts/fsdp2_fp8.py --device cpu            # tiny shapes, gloo

For each policy (bf16_baseline and jetrl_unified by default): rank 0 first trains a plain copy of the model on
the whole global batch (the reference); then both ranks train the FSDP2-wrapped model, each on its half of the
batch, and rank 0 compares. Reported per policy (JSON on stdout, and in --out):
- loss per step, FSDP2 against the reference (each rank's loss is its half's mean; the two halves hold equal
  token counts, so their average is the global mean the reference computes);
- per-parameter relative gradient difference ||g - g_ref|| / ||g_ref|| at every step, from the all-gathered
  full gradients (`full_tensor()`): not bitwise, because FSDP2 sums two half-batch GEMMs in its reduce-scatter
  where the reference accumulates one GEMM over all tokens (a different reduction order, then BF16 rounding);
- logits of the first forward (before any step), each rank's rows against the reference's same rows: with
  `numerics.batch_invariant: true` bitwise, since a row's bits may not depend on which rows share its batch;
  after the steps the weights differ by the gradient rounding above, so logits match only within tolerance;
- the FP8 weights a rollout would receive: each rewritten linear's `full_tensor()` quantized in 128x128 blocks
  (`quantize_blocks`) byte-identical to (a) the reference's `Fp8Linear.quantized_weight()` before any step and
  (b) the Q(W) the FSDP2 forward itself used after the last step (what training multiplied with);
- that every Fp8Linear forward saw a plain full-shape weight, not its DTensor shard (FSDP2 unshards first);
- seconds per optimizer step (first step excluded: allocation, Triton compilation).

What FSDP2 wraps: its hooks fire only in a module's `__call__`, and `models.decoder.Decoder._layers` reads each
layer's submodules (norms, BF16 linears) directly instead of calling the layer, so `fully_shard` on a decoder
layer would leave that layer's parameters sharded during forward. The units are therefore every rewritten
`Fp8Linear` (which the decoder calls) and the root (embeddings, norms, lm_head and any BF16 linear: gathered for
the whole forward). bf16_baseline has no Fp8Linear, so it runs as one root unit.

After every optimizer step `rewrite.invalidate_weight_caches` retires each cached Q(W) (FSDP2 re-gathers the
weight into the same storage, which the cache key may not see change).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from precision_engine.models.decoder import Decoder
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.quantize import quantize_blocks
from precision_engine.pipeline import compile_for_model
from precision_engine.rewrite import apply, invalidate_weight_caches

# NVLink multicast stays off on the shared hosts (KINDS.md): set before NCCL initialises, kept for any child.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SIZES = {  # (layers, hidden, heads, kv_heads, intermediate, vocab, global batch, seq len)
    "cpu": (2, 256, 4, 4, 768, 256, 4, 64),
    "cuda": (8, 2048, 16, 8, 5632, 32000, 8, 512),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), required=True)
    p.add_argument("--policies", default="bf16_baseline,jetrl_unified")
    p.add_argument("--layers", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--intermediate", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--batch", type=int, help="global batch (rows), split evenly between the ranks")
    p.add_argument("--seq-len", type=int)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    names = ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "batch", "seq_len")
    for name, default in zip(names, SIZES[args.device]):
        if getattr(args, name) is None:
            setattr(args, name, default)
    return args


def hf_config(args) -> dict:
    return {
        "model_type": "llama", "vocab_size": args.vocab, "hidden_size": args.hidden,
        "intermediate_size": args.intermediate, "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 4096, "rope_theta": 10000.0, "tie_word_embeddings": False,
    }


def build(config: dict, config_path: str, policy: str, args, device) -> Decoder:
    """The decoder with `policy`'s training phase applied (same seed on every rank and in the reference)."""
    model = Decoder.from_config(config, seed=args.seed, device=device, batch_invariant=True).train()
    model.fuse_linears = False  # FSDP2's per-linear units run each projection in its own call: the reference too
    plan = compile_for_model(policy, config_path, overrides=("numerics.batch_invariant=true",))
    apply(plan, model, "train")
    return model


def batches(args, device) -> list[torch.Tensor]:
    """One fixed random token batch [batch, seq_len] per step, from the seed alone."""
    g = torch.Generator().manual_seed(args.seed + 1)
    return [torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=g).to(device) for _ in range(args.steps)]


def lm_loss(model, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(ids)  # [B, L, V]
    loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    return loss, logits


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(model, data, args, device, full_grad) -> dict:
    """AdamW steps; per step the loss, each parameter's full gradient (via `full_grad`) and the wall time of
    forward, backward and optimizer step (gathering the gradients for the check is not timed). The first
    forward's logits are kept (before any step)."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    losses, grads, seconds, first_logits = [], [], [], None
    for ids in data:
        sync(device)
        start = time.perf_counter()
        loss, logits = lm_loss(model, ids)
        loss.backward()
        sync(device)
        elapsed = time.perf_counter() - start
        if first_logits is None:
            first_logits = logits.detach()
        step_grads = {n: full_grad(p.grad) for n, p in model.named_parameters()}  # untimed: the check's cost
        sync(device)
        start = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        invalidate_weight_caches(model)
        sync(device)
        seconds.append(elapsed + time.perf_counter() - start)
        losses.append(loss.detach())
        grads.append(step_grads)
    return {"losses": losses, "grads": grads, "seconds": seconds, "first_logits": first_logits}


def fsdp_wrap(model, device) -> list[str]:
    """fully_shard every Fp8Linear (the decoder calls them) and then the root; gradients reduced in FP32."""
    mesh = dist.init_device_mesh(device.type, (dist.get_world_size(),))
    mp = MixedPrecisionPolicy(reduce_dtype=torch.float32)
    units = [name for name, m in model.named_modules() if isinstance(m, Fp8Linear)]
    for name in units:
        fully_shard(model.get_submodule(name), mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return units


def watch_fp8_weights(model) -> list[tuple[str, bool, tuple]]:
    """A forward pre-hook on every Fp8Linear recording (name, weight is a DTensor, weight shape). Registered
    after `fully_shard`, whose unshard hook is prepended, so it sees what the forward itself reads."""
    seen = []
    for name, m in model.named_modules():
        if isinstance(m, Fp8Linear):
            m.register_forward_pre_hook(
                lambda mod, _, name=name: seen.append((name, isinstance(mod.weight, DTensor), tuple(mod.weight.shape)))
            )
    return seen


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def same_q(a, b) -> bool:
    return same_bytes(a.data, b.data) and same_bytes(a.scale, b.scale)


def run_policy(policy: str, config: dict, config_path: str, args, device, rank: int) -> dict | None:
    data = batches(args, device)
    half = args.batch // 2
    local = [ids[rank * half:(rank + 1) * half] for ids in data]

    ref = ref_q0 = None
    if rank == 0:
        model = build(config, config_path, policy, args, device)
        ref_q0 = {n: m.quantized_weight() for n, m in model.named_modules() if isinstance(m, Fp8Linear)}
        ref = train(model, data, args, device, full_grad=lambda g: g.detach().clone())
        ref["weights"] = {n: p.detach().clone() for n, p in model.named_parameters()}
        del model
    dist.barrier()

    model = build(config, config_path, policy, args, device)
    units = fsdp_wrap(model, device)
    seen = watch_fp8_weights(model)
    fmt = {n: m.spec.weight for n, m in model.named_modules() if isinstance(m, Fp8Linear)}
    shapes = {n: (m.out_features, m.in_features) for n, m in model.named_modules() if isinstance(m, Fp8Linear)}
    rollout_q0 = {n: quantize_blocks(model.get_submodule(n).weight.full_tensor(), fmt[n]) for n in fmt}
    run = train(model, local, args, device, full_grad=lambda g: g.full_tensor())
    # One more forward (no step after it) so each Fp8Linear caches the Q(W) training now multiplies with.
    with torch.no_grad():
        final_logits = model(local[0])
    model.reshard()  # the root keeps its parameters gathered after forward (FSDP2 expects backward next)
    used_q = {n: m._w_cache[1] for n, m in model.named_modules() if isinstance(m, Fp8Linear)}
    full = {n: p.full_tensor() for n, p in model.named_parameters()}
    rollout_q = {n: quantize_blocks(full[f"{n}.weight"], fmt[n]) for n in fmt}
    first_rows = [torch.empty_like(run["first_logits"]) for _ in range(2)]
    dist.all_gather(first_rows, run["first_logits"].contiguous())
    last_rows = [torch.empty_like(final_logits) for _ in range(2)]
    dist.all_gather(last_rows, final_logits.contiguous())
    losses = torch.stack(run["losses"])
    dist.all_reduce(losses)
    local_q_ok = torch.tensor(int(all(same_q(used_q[n], rollout_q[n]) for n in fmt)), device=device)
    dist.all_reduce(local_q_ok, op=dist.ReduceOp.MIN)
    if rank != 0:
        return None

    with torch.no_grad():
        ref_model = build(config, config_path, policy, args, device)
        ref_model.load_state_dict(ref["weights"])
        ref_final = ref_model(data[0])
    fsdp_losses = (losses / 2).tolist()
    ref_losses = [float(x) for x in ref["losses"]]
    grad_rel = [max(rel(g[n], r[n]) for n in r) for g, r in zip(run["grads"], ref["grads"])]
    steady = run["seconds"][1:] or run["seconds"]
    return {
        "policy": policy,
        "fsdp_units": len(units) + 1,
        "losses_fsdp": fsdp_losses,
        "losses_ref": ref_losses,
        "loss_abs_diff_max": max(abs(a - b) for a, b in zip(fsdp_losses, ref_losses)),
        "grad_rel_diff_max_per_step": grad_rel,
        "first_step_grad_rel_diff_by_param": {n: rel(run["grads"][0][n], ref["grads"][0][n]) for n in ref["grads"][0]},
        "logits_before_steps_bitwise": same_bytes(torch.cat(first_rows), ref["first_logits"]),
        "logits_after_steps_rel_diff": rel(torch.cat(last_rows).float(), ref_final.float()),
        "logits_after_steps_bitwise": same_bytes(torch.cat(last_rows), ref_final),
        "weights_after_steps_bitwise": all(same_bytes(full[n], ref["weights"][n]) for n in full),
        "fp8_rollout_matches_reference_before_steps": all(same_q(rollout_q0[n], ref_q0[n]) for n in fmt),
        "fp8_rollout_matches_used_after_steps": bool(local_q_ok.item()),
        "fp8_forward_saw_full_weights": all(not is_dt and shape == shapes[n] for n, is_dt, shape in seen),
        "fp8_forwards_seen": len(seen),
        "seconds_per_step_fsdp": sum(steady) / len(steady),
        "seconds_per_step_ref": sum(ref["seconds"][1:] or ref["seconds"]) / max(1, len(ref["seconds"]) - 1),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.update(MULTICAST_OFF)
    if args.batch % 2:
        raise SystemExit(f"--batch {args.batch}: the global batch is split between 2 ranks, use an even size")
    backend = "nccl" if args.device == "cuda" else "gloo"
    dist.init_process_group(backend)
    rank = dist.get_rank()
    if dist.get_world_size() != 2:
        raise SystemExit(f"run with 2 processes (torchrun --nproc_per_node 2), not {dist.get_world_size()}")
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    config = hf_config(args)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        config_path = str(Path(tmp) / "config.json")
        Path(config_path).write_text(json.dumps(config))
        for policy in args.policies.split(","):
            results.append(run_policy(policy, config, config_path, args, device, rank))
    dist.destroy_process_group()
    if rank == 0:
        report = {"device": args.device, "config": config, "batch": args.batch, "seq_len": args.seq_len,
                  "steps": args.steps, "results": results}
        text = json.dumps(report, indent=1)
        print(text)
        if args.out:
            args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
