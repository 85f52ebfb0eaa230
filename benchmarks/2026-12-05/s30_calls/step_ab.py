"""The graphed fwd+bwd of the batch-invariant FP8 linear (`bench linear`'s fp8_bi, fwd+bwd/graph) on the 8B
shapes at 8192 tokens, its wgrad re-quantization on the Triton kernel against the Gluon kernel of
gluon_requant.patch (which must be applied), alternating in one process, BF16 timed in each round; and dW the
same bytes under both. What the re-quantizer's speed is worth to a training step.

    python3 benchmarks/2026-12-05/s30_calls/step_ab.py OUT.json
"""

import json
import sys

import torch

from precision_engine.bench.gemm import time_graphed
from precision_engine.bench.linear import _input_sets, _train_step
from precision_engine.numerics import gluon_requant

SHAPES = [(4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (12288, 4096), (4096, 12288), (28672, 4096)]
M, ROUNDS, REPS, WARMUP = 8192, 2, 30, 5
GLUON_RUNS = gluon_requant.runs


def dispatch(kernel: str) -> None:
    """AUTO's re-quantizer: the Gluon kernel where it runs, or the Triton kernel everywhere."""
    gluon_requant.runs = GLUON_RUNS if kernel == "gluon" else (lambda *args: False)


def step_ms(name: str, sets: list) -> float:
    return time_graphed(lambda layers, x, dy: _train_step(layers[name], x, dy), sets, warmup=WARMUP, reps=REPS)


def weight_grad(sets: list, kernel: str) -> torch.Tensor:
    dispatch(kernel)
    layers, x, dy = sets[0]
    _train_step(layers["fp8_bi"], x, dy)
    return layers["fp8_bi"].weight.grad.clone()


def main(out: str) -> None:
    rows = []
    for n, k in SHAPES:
        sets = _input_sets(n, k, M, ["fp8_bi"], seed=n + k, device="cuda")
        same = torch.equal(weight_grad(sets, "triton").view(torch.int16), weight_grad(sets, "gluon").view(torch.int16))
        row = {"n": n, "k": k, "m": M, "dW_same_bytes": same}
        for rnd in range(ROUNDS):
            row.setdefault("bf16_ms", []).append(step_ms("bf16", sets))
            for kernel in ("triton", "gluon"):
                dispatch(kernel)
                row.setdefault(f"{kernel}_ms", []).append(step_ms("fp8_bi", sets))
        dispatch("gluon")
        bf16 = min(row["bf16_ms"])
        print(f"{n}x{k}: dW same bytes {same}; x BF16 (best of {ROUNDS} rounds) triton "
              f"{bf16 / min(row['triton_ms']):.3f}, gluon {bf16 / min(row['gluon_ms']):.3f}; ms bf16 "
              f"{row['bf16_ms']} triton {row['triton_ms']} gluon {row['gluon_ms']}", flush=True)
        rows.append(row)
        del sets
        torch.cuda.empty_cache()
    with open(out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
