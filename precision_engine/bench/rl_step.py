"""One GRPO step of an 8B-shaped model (8 of its layers by default) on one GPU, per policy, in one run: rollout +
logprob recompute + update.

    python -m precision_engine.bench.rl_step --model llama-3.1-8b --prompts 16 --samples 4 --prompt 128 --gen 256

Random BF16 weights (drawn on the GPU, `bench.rollout.random_decoder`), random prompt tokens, a reward drawn at
random per sample (so every group has something to reinforce: the update does real work), one warm-up step
(captures the decode graph, builds the optimizer state), then the median of `steps` timed steps of
`GRPOTrainer.step`: the policy's rollout numerics sample, its training-phase model scores and updates (AdamW on
the policy's master weights), the FP8 caches are invalidated. Each policy gets the same weights and prompts.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from precision_engine.bench.rollout import random_decoder
from precision_engine.models.loader import config_spec, resolve_config
from precision_engine.pipeline import compile_for_model
from precision_engine.rl.trainer import GRPOConfig, GRPOTrainer

POLICIES = ("bf16_baseline", "jetrl_unified")


@dataclass(frozen=True)
class _Prompt:
    ids: tuple[int, ...]
    answer: str = ""


class _TokenIds:
    """The trainer's tokenizer interface over prompts that are token ids already (no text: random weights)."""

    pad_id, eos_ids = 0, ()  # no EOS: every row samples all `gen` tokens

    def encode_prompt(self, problem: _Prompt) -> list[int]:
        return list(problem.ids)

    def decode(self, ids) -> str:
        return " ".join(map(str, ids))


def bench_rl_step(model_spec: str = "llama-3.1-8b", *, layers: int | None = 8, prompts: int = 16, samples: int = 4,
                  prompt: int = 128, gen: int = 256, steps: int = 2, micro_batch: int = 8,
                  device: str = "cuda", master_weights: str | None = None) -> list[dict]:
    """`layers` cuts the model to that many decoder layers of its shapes (None: all): bf16_baseline's FP32 master
    weights, gradients and AdamW state for all 32 layers of an 8B model (~128 GB) leave no room on one H200.
    `master_weights` overrides every policy's (e.g. "bf16": the whole 8B model then fits for both policies)."""
    config = dict(resolve_config(model_spec))
    if layers is not None:
        config["num_hidden_layers"] = layers
    overrides = () if master_weights is None else (f"master_weights={master_weights}",)
    with config_spec(config) as spec:  # the plans are compiled for the cut model
        plans = {name: compile_for_model(name, spec, overrides=overrides) for name in POLICIES}
    generator = torch.Generator().manual_seed(0)
    problems = [_Prompt(tuple(torch.randint(1, config["vocab_size"], (prompt,), generator=generator).tolist()))
                for _ in range(prompts)]
    grpo = replace(GRPOConfig(), prompts_per_step=prompts, samples_per_prompt=samples, max_new_tokens=gen,
                   micro_batch_size=micro_batch)
    rows = []
    for name, plan in plans.items():
        policy = plan.policy
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[policy.master_weights.value]
        model = random_decoder(config, device=device, dtype=dtype, batch_invariant=policy.numerics.batch_invariant)
        model.compute_dtype = torch.bfloat16
        rewards = random.Random(0)
        trainer = GRPOTrainer(model, plan, _TokenIds(), lambda text, answer: float(rewards.random() < 0.5),
                              grpo)
        seconds, metrics = [], {}
        for step in range(steps + 1):
            _synchronize(device)
            metrics = trainer.step(problems, seed=step)
            if step:  # step 0 is the warm-up
                seconds.append(metrics["time/step_s"])
        rows.append({"policy": name, "master_weights": policy.master_weights.value,
                     "batch_invariant": policy.numerics.batch_invariant, "step_s": statistics.median(seconds),
                     "rollout_s": metrics["time/rollout_s"], "train_s": metrics["time/train_s"],
                     "max_abs_dlogp": metrics.get("mismatch/max_abs_dlogp"), "seconds": seconds})
        del trainer, model
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    base = rows[0]["step_s"]
    for row in rows:
        row["bf16_s_over_this"] = base / row["step_s"]
    return rows


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def format_table(rows: list[dict]) -> str:
    lines = [f"{'policy':16} {'step s':>8} {'rollout s':>10} {'train s':>8} {'max|dlogp|':>11} {'vs bf16':>8}"]
    for r in rows:
        lines.append(f"{r['policy']:16} {r['step_s']:8.2f} {r['rollout_s']:10.2f} {r['train_s']:8.2f} "
                     f"{r['max_abs_dlogp']:11.3g} {r['bf16_s_over_this']:7.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--layers", type=int, default=8, help="decoder layers kept (0: all)")
    for flag, default in (("--prompts", 16), ("--samples", 4), ("--prompt", 128), ("--gen", 256), ("--steps", 2),
                          ("--micro-batch", 8)):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--master-weights", choices=("bf16", "fp32"), help="override every policy's")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = bench_rl_step(args.model, layers=args.layers or None, prompts=args.prompts, samples=args.samples,
                         prompt=args.prompt, gen=args.gen,
                         steps=args.steps, micro_batch=args.micro_batch, device=args.device,
                         master_weights=args.master_weights)
    print(format_table(rows))
    if args.out:
        args.out.write_text(json.dumps({"command": "bench.rl_step " + " ".join(argv or []), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
