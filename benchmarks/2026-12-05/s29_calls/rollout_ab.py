"""The engine's rollout on a random Llama-3.1-8B, jetrl_unified_kv, batch-invariant mode (the on-policy decode):
the wide weights' decode rule before the twenty-ninth session (WIDE_CHAIN_MAX_M = 0: the fused gate/up on its
whole-tile launches at every M) against the one shipped (the chain launch up to 32 tokens).

The decode batch is the number of rows, so batches of 16 and 32 put every step's fused gate/up GEMM at M = 16 and
32. For each batch: the two rules alternate over two rounds, each a fresh Engine (its CUDA graph captured under
that rule) timed as `bench rollout` times it (tok/s, median of 3 calls after a warm-up); the tokens and the
logprobs recorded while sampling must be equal, bitwise, under both rules (the chain launch gives the same bits).

    python3 benchmarks/2026-12-05/s29_calls/rollout_ab.py [out.json]   (~2-3 minutes on the H200)
"""

import json
import sys

import torch

from precision_engine.bench.rollout import _engine, _release, random_decoder, timed_calls
from precision_engine.models.loader import resolve_config
from precision_engine.numerics import triton_gemm as T

MODEL, POLICY, PROMPT, GEN, SEED, DEVICE = "llama-3.1-8b", "jetrl_unified_kv", 128, 128, 0, "cuda"
RULES = {"before": 0, "shipped": T.WIDE_CHAIN_MAX_M}


def timed_rule(model, ids: torch.Tensor, name: str) -> tuple[float, tuple[torch.Tensor, torch.Tensor]]:
    """(tok/s, the last call's tokens and logprobs) of a fresh Engine under rule `name`."""
    T.WIDE_CHAIN_MAX_M = RULES[name]
    engine = _engine(model, MODEL, POLICY, True, ids)
    prompts, last = ids.tolist(), []

    def call() -> int:
        last[:] = [engine.generate(prompts, max_new_tokens=GEN, temperature=1.0, seed=SEED)]
        return int(last[0].generated_mask.sum())

    rate, _ = timed_calls(call, 3)
    return rate, (last[0].token_ids.cpu(), last[0].logprobs.cpu())


def main() -> None:
    model = random_decoder(resolve_config(MODEL), device=DEVICE, seed=SEED)
    results = []
    try:
        for batch in (16, 32):
            ids = torch.randint(0, model.config.vocab_size, (batch, PROMPT), device=DEVICE,
                                generator=torch.Generator(device=DEVICE).manual_seed(SEED + 1))
            rates: dict[str, list[float]] = {name: [] for name in RULES}
            outputs = {}
            for round_ in range(2):
                for name in RULES if round_ == 0 else list(RULES)[::-1]:
                    rate, output = timed_rule(model, ids, name)
                    rates[name].append(rate)
                    outputs.setdefault(name, output)
                    _release()
            same = all(torch.equal(a, b) for a, b in zip(outputs["before"], outputs["shipped"]))
            results.append({"batch": batch, "tok_s": rates, "tokens_and_logprobs_equal": same})
            print(f"batch {batch}: " + "  ".join(f"{name} {' / '.join(f'{r:.0f}' for r in rs)} tok/s"
                                                   for name, rs in rates.items())
                  + f"; tokens and logprobs {'equal' if same else 'DIFFER'}", flush=True)
    finally:
        T.WIDE_CHAIN_MAX_M = RULES["shipped"]
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
