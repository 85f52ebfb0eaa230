"""`precision bench linear`: the whole FP8 linear (quantizers included) against BF16 nn.Linear, same run.

Measured per shape and token count:
  fwd      forward under no_grad with the cached FP8 weight: what rollout pays per call
  fwd+bwd  a training step's share: the weight is marked changed first (so it is re-quantized, as after every
           optimizer step), forward, backward with a fresh random dy, bf16 grads for x and W
Variants: `fp8_cublas` runs all three GEMMs through cuBLAS; `fp8_bi` is the batch-invariant default, its
forward on the Triton kernel (same bits as decode), dgrad and wgrad on cuBLAS; `torchao` and `torchao_triton` are
torchao's `Float8BlockwiseLinear` over the same weight (cuBLAS and Triton GEMMs; see `torchao_ref`: it re-quantizes
W on every call, forward included), at training sizes only, where it runs; otherwise `torchao_note` says why.
Decode sizes (M <= 64) are forward only, on the Triton small-M kernel, timed as CUDA-graph replays as a rollout
engine runs decode. Every variant of a row gets the same inputs; one that fails leaves its reason in
`<variant>_note` and the others run.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from precision_engine.bench import torchao_ref
from precision_engine.bench.gemm import DECODE_M, QUICK_SHAPES, SHAPES_8B, TRAIN_M, notes, timed
from precision_engine.bench.timing import rotation

KINDS = ("fp8_cublas", "fp8_bi", *torchao_ref.VARIANTS)  # the table's columns after bf16


def _specs():
    from precision_engine.numerics.formats import PRESET_FORMATS as P
    from precision_engine.numerics.formats import Kernel, LinearSpec
    from precision_engine.policy.model import NumericsSpec

    base = dict(weight=P["fp8_block_weight"], input=P["fp8_group_act"], grad_output=P["fp8_group_act"],
                wgrad_operands=P["fp8_group_tokens"])
    return {
        "fp8_cublas": (LinearSpec(**base, kernel=Kernel.CUBLAS), NumericsSpec(batch_invariant=False)),
        "fp8_bi": (LinearSpec(**base), NumericsSpec(batch_invariant=True)),
    }


def _train_step(layer: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> None:
    layer.weight.grad = None
    x.grad = None
    torch.autograd.graph.increment_version(layer.weight)  # as after an optimizer step: re-quantize W
    layer(x).backward(dy)


def _forward(layer: nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        layer(x)


def bench_linear(*, quick: bool = False, reps: int = 30, warmup: int = 5,
                 shapes: Sequence[tuple[int, int]] | None = None, ms: Sequence[int] | None = None,
                 device: str = "cuda") -> list[dict]:
    """One row per (shape, M, pass): BF16 ms, each variant's ms and its speed-up (BF16 ms / variant ms).

    `shapes` (N, K) and `ms` (token counts; decode sizes are those <= 64) override the 8B lists (or --quick's);
    `device` cpu runs the same loop at toy sizes (tests), decode rows eagerly there."""
    from precision_engine.numerics.linear import Fp8Linear

    specs = _specs()
    torchao_note = torchao_ref.unavailable(device)
    shapes = shapes or (QUICK_SHAPES if quick else SHAPES_8B)
    ms = ms or ((TRAIN_M[:1] + DECODE_M[:1]) if quick else (TRAIN_M + DECODE_M))
    rows = []
    for n, k in shapes:
        for m in ms:
            train = m > DECODE_M[-1]

            def make():
                lin = nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16)
                layers = {"bf16": lin}
                for name, (spec, numerics) in specs.items():
                    layers[name] = Fp8Linear.from_linear(lin, spec, numerics=numerics)
                if train and torchao_note is None:
                    for name, use_triton in torchao_ref.VARIANTS.items():
                        layers[name] = torchao_ref.blockwise_linear(lin, use_triton=use_triton)
                x = torch.randn(m, k, device=device, dtype=torch.bfloat16, requires_grad=train)
                dy = torch.randn(m, n, device=device, dtype=torch.bfloat16) if train else None
                return layers, x, dy

            sets = rotation(make, (n * k + 2 * m * (n + k)) * 2)
            names = list(sets[0][0]) if train else ["bf16", "fp8_bi"]
            passes = ("fwd", "fwd+bwd") if train else ("fwd",)
            for pass_ in passes:
                row = {"n": n, "k": k, "m": m, "pass": pass_}
                for name in names:
                    if pass_ == "fwd":
                        fn = lambda layers, x, dy, name=name: _forward(layers[name], x)  # noqa: E731
                    else:
                        fn = lambda layers, x, dy, name=name: _train_step(layers[name], x, dy)  # noqa: E731
                    try:
                        row[f"{name}_ms"] = timed(fn, sets, graphed=not train and device == "cuda",
                                                  warmup=warmup, reps=reps)
                    except Exception as err:  # noqa: BLE001 (one variant failing must not lose the others)
                        if name == "bf16":
                            raise
                        row[f"{name}_note"] = f"{type(err).__name__}: {str(err)[:200]}"
                for name in names[1:]:
                    if f"{name}_ms" in row:
                        row[f"{name}_x"] = row["bf16_ms"] / row[f"{name}_ms"]
                if train and torchao_note is not None:
                    row["torchao_note"] = torchao_note
                rows.append(row)
            del sets
    return rows


def format_table(rows: list[dict]) -> str:
    """Shape, M, pass, BF16 ms, then ms and speed-up per variant ("-": not run), then the notes saying why."""
    head = f"{'N x K':>13} {'M':>6} {'pass':>8} {'bf16 ms':>9}" + "".join(f" {k + ' ms':>17} {'x':>6}" for k in KINDS)
    lines = [head]
    for r in rows:
        line = f"{r['n']:>6}x{r['k']:<6} {r['m']:>6} {r['pass']:>8} {r['bf16_ms']:>9.4f}"
        for kname in KINDS:
            if f"{kname}_ms" in r:
                line += f" {r[f'{kname}_ms']:>17.4f} {r[f'{kname}_x']:>6.2f}"
            else:
                line += f" {'-':>17} {'-':>6}"
        lines.append(line)
    return "\n".join(lines + notes(rows))
