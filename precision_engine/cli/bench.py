"""`precision bench kernels|linear`: FP8 against BF16 on this machine's GPU, same run, table + JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from precision_engine.errors import UnsupportedError, UsageError


OutOpt = Annotated[Path | None, typer.Option("--out", help="Write every number and the environment as JSON.")]
QuickOpt = Annotated[bool, typer.Option("--quick", help="Two shapes, one training and one decode size.")]


def register(app: typer.Typer) -> None:
    """`precision bench kernels|linear|rollout`, one sub-command each."""
    from precision_engine.cli import bench_rollout

    group = typer.Typer(help="Benchmarks on this machine's GPU, every ratio against a baseline of the same run.",
                        no_args_is_help=True)

    @group.command()
    def kernels(out: OutOpt = None, quick: QuickOpt = False) -> None:
        """The FP8 GEMMs alone (cuBLAS, Triton, DeepGEMM) against the BF16 GEMM, same run, table + JSON.

        Shapes: the projections of Llama-3.1-8B and Qwen3-8B at 8192/16384 tokens (training) and 1/16/64 (decode).

        Examples:
          precision bench kernels --quick
        """
        _bench("kernels", out, quick)

    @group.command()
    def linear(out: OutOpt = None, quick: QuickOpt = False) -> None:
        """The FP8 linear layer (forward, forward+backward) against nn.Linear in BF16, same run, table + JSON.

        Examples:
          precision bench linear --out bench_linear.json
        """
        _bench("linear", out, quick)

    bench_rollout.register(group)
    app.add_typer(group, name="bench")


def require_gpu(out: Path | None, verb: str) -> None:
    """Refuse before minutes of benchmarking, not after: an --out whose folder cannot be made, or no GPU."""
    if out is not None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UsageError(f"--out {out}: cannot create its folder ({err.strerror})") from None
    import torch

    if not torch.cuda.is_available():
        raise UnsupportedError(f"{verb} needs a CUDA GPU (none is visible); run it on the GPU machine")


def _bench(what: str, out: Path | None, quick: bool) -> None:
    """Benchmark FP8 against BF16 (median of CUDA-event timings, fresh random data, BF16 in the same run)."""
    require_gpu(out, "precision bench")
    from precision_engine.bench import gemm, linear

    if what == "kernels":
        rows = gemm.bench_kernels(quick=quick)
        kinds = [k for k in ("cublas", "triton", "deep_gemm") if any(f"{k}_ms" in r for r in rows)]
        table = gemm.format_table(rows, kinds)
    else:
        rows = linear.bench_linear(quick=quick)
        table = linear.format_table(rows)
    typer.echo(table)
    if out is not None:
        result = {"command": " ".join(["precision", *sys.argv[1:]]), "env": gemm.environment(), "rows": rows}
        partial = out.with_name(out.name + ".partial")
        partial.write_text(json.dumps(result, indent=1))
        partial.replace(out)  # atomic: a reader never sees half a file
        typer.echo(f"wrote {out}")
