"""`precision bench rollout`: the engine's tokens/s per format and mode against transformers' generate.

Wiring: `register(app)` adds a `rollout` command to `app`, the typer app (or `bench` sub-app) it is given; the
work is `bench.rollout.run`, which `python -m precision_engine.bench.rollout` also calls.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer



def register(app: typer.Typer) -> None:
    @app.command("rollout")
    def rollout(
        model: Annotated[str, typer.Option("--model", help="Model spec: a built-in name or a config.json.")]
        = "llama-3.1-8b",
        batch: Annotated[int, typer.Option("--batch", min=1, help="Rows generated together.")] = 64,
        prompt: Annotated[int, typer.Option("--prompt", min=1, help="Random prompt tokens per row.")] = 128,
        gen: Annotated[int, typer.Option("--gen", min=1, help="Sampled tokens per row (no EOS).")] = 256,
        runs: Annotated[int, typer.Option("--runs", min=1, help="Timed generate calls per engine row.")] = 3,
        hf_runs: Annotated[int, typer.Option("--hf-runs", min=1, help="Timed calls per transformers row.")] = 1,
        no_transformers: Annotated[bool, typer.Option("--no-transformers", help="The engine's rows only.")]
        = False,
        out: Annotated[Path | None, typer.Option("--out", help="Write every row and the environment as JSON.")]
        = None,
    ) -> None:
        """Rollout tokens/s on this GPU: BF16, FP8 W8A8 and FP8 W8A8 + FP8 KV, each in fast and batch-invariant
        mode, and transformers' generate (static cache, eager and compiled) on the same weights and batch.

        Random weights; tok/s = generated tokens / wall time of generate, median of --runs calls after one
        warm-up call (which captures the CUDA graph). Rows print as they finish; the table comes last.

        Examples:
          precision bench rollout --model llama-3.1-8b --batch 64 --prompt 128 --gen 256
          precision bench rollout --no-transformers --runs 5 --out rollout.json
        """
        from precision_engine.cli.bench import require_gpu

        require_gpu(out, "precision bench rollout")
        from precision_engine.bench.rollout import run

        run(model, batch=batch, prompt=prompt, gen=gen, runs=runs, hf_runs=hf_runs,
            transformers_rows=not no_transformers, out=out, command=shlex.join(["precision", *sys.argv[1:]]),
            echo=typer.echo)


__all__ = ["register"]
